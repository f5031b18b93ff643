//go:build !amd64

package dgemm

// Off amd64 no kernel runs: every product is gonum's own Dgemm.
const (
	has4x8  = false
	has8x16 = false
)

func tile4x8(a *float64, ai, al int, b *float64, ldb, t int, c *float64, ldc int, alpha float64, zeros bool) {
	panic("dgemm: no kernels on this architecture")
}

func tile8x16(a *float64, ai, al int, b *float64, ldb, bhi, t int, c *float64, ldc int, alpha float64, zeros bool) {
	panic("dgemm: no kernels on this architecture")
}

func nonzero8(a *float64, ai, al, t int) bool {
	panic("dgemm: no kernels on this architecture")
}

func nonzero4(a *float64, ai, al, t int) bool {
	panic("dgemm: no kernels on this architecture")
}

func prefetch8x16(c *float64, ldc int) {
	panic("dgemm: no kernels on this architecture")
}
