//go:build !amd64

package sgemm

// available and available512 are false: NT sums every output with dot.
const (
	available    = false
	available512 = false
)

func kernel2x4(a *float32, lda int, b *float32, ldb int, c *float32, ldc int, k, slice int) {
	panic("sgemm: no kernel2x4 on this architecture")
}

func kernel1x4(a *float32, b *float32, ldb int, c *float32, k, slice int) {
	panic("sgemm: no kernel1x4 on this architecture")
}

func kernel3x4p(a *float32, lda int, pb *float32, c *float32, ldc int, k, slice int, next *float32) {
	panic("sgemm: no kernel3x4p on this architecture")
}

func kernel1x4p(a *float32, pb *float32, c *float32, k, slice int) {
	panic("sgemm: no kernel1x4p on this architecture")
}

func pack4(dst *float32, b *float32, ldb int, k int) {
	panic("sgemm: no pack4 on this architecture")
}

func kernel4x4z(a *float32, lda int, b *float32, ldb int, c *float32, ldc int, k, slice int) {
	panic("sgemm: no kernel4x4z on this architecture")
}

func kernel3x16(a *float32, lda int, pb *float32, c *float32, ldc int, k, slice int, next *float32) {
	panic("sgemm: no kernel3x16 on this architecture")
}

func kernel1x16(a *float32, pb *float32, c *float32, k, slice int) {
	panic("sgemm: no kernel1x16 on this architecture")
}

func pack16(dst *float32, b *float32, ldb int, k int) {
	panic("sgemm: no pack16 on this architecture")
}

func nn16(a *float32, k int, b *float32, ldb int, c *float32, mask uint64) {
	panic("sgemm: no nn16 on this architecture")
}

func nn64(a *float32, k int, b *float32, ldb int, c *float32, mask uint64) {
	panic("sgemm: no nn64 on this architecture")
}

func dotT16(a *float32, pb *float32, c *float32, tr, n16, n4, n1 int) {
	panic("sgemm: no dotT16 on this architecture")
}

func dotT8(a *float32, pb *float32, c *float32, tr, n16, n4, n1 int) {
	panic("sgemm: no dotT8 on this architecture")
}

func nn32(a *float32, k int, b *float32, ldb int, c *float32) {
	panic("sgemm: no nn32 on this architecture")
}

func nn8(a *float32, k int, b *float32, ldb int, c *float32, mask *int32) {
	panic("sgemm: no nn8 on this architecture")
}
