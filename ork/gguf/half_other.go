//go:build !amd64

package gguf

// hasF16C is false off amd64: there is no kernel.
var hasF16C = false

// f16Kernel converts nothing off amd64: the table does it all.
func f16Kernel(dst []float32, src []byte) int { return 0 }
