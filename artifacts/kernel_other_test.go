//go:build !amd64

package artifacts

// setWideKernel: off amd64 there is only the guts kernel (wideKernel is the constant false).
func setWideKernel(bool) {}
