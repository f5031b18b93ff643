//go:build !amd64

package calib

// hasF32Kernel is false off amd64: the Go loop converts every value.
var hasF32Kernel = false

// f32Kernel converts nothing off amd64.
func f32Kernel(dst []byte, src []float64) int { return 0 }
