//go:build !amd64

package blake3x

// setWideKernel: off amd64 there is only the guts kernel (wideKernel is the constant false).
func setWideKernel(bool) {}
