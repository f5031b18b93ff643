//go:build !amd64

package gguf

// hasQ8Kernel is false off amd64: Q8_0 decodes by the Go loop.
var hasQ8Kernel = false

// q8Kernel decodes nothing off amd64.
func q8Kernel(dst []float32, src []byte, nb int) bool { return false }
