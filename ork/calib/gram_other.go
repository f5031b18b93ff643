//go:build !amd64

package calib

// hasGramKernel and hasGram512 are false off amd64: the pure-Go Hessian update stays gonum's Dgemm.
const (
	hasGramKernel = false
	hasGram512    = false
)

func gramTile4x8(a, b *float64, ldx, t int, c *float64, ldc int) {
	panic("calib: no gramTile4x8 on this architecture")
}

func gramTile8x16(a, b *float64, ldx, t int, c *float64, ldc int) {
	panic("calib: no gramTile8x16 on this architecture")
}
