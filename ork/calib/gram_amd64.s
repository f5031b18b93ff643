#include "textflag.h"

// ROW adds, for row i of the tile (a value at off(SI), the four-value halves of C's row in lo and hi),
// a·b to both halves — unless a is zero (gonum's Dgemm skips a zero factor; a NaN is not zero): the
// product rounded (VMULPD), then added (VADDPD), no fused multiply-add.
#define ROW(off, lo, hi, skip) \
	VBROADCASTSD off(SI), Y12; \
	VUCOMISD X15, X12; \
	JP 2(PC); \
	JE skip; \
	VMULPD Y8, Y12, Y13; \
	VADDPD Y13, lo, lo; \
	VMULPD Y9, Y12, Y14; \
	VADDPD Y14, hi, hi; \
skip:

// func gramTile4x8(a, b *float64, ldx, t int, c *float64, ldc int)
// For l = 0..t-1 in order and the tile's rows i = 0..3 and columns j = 0..7:
// c[i·ldc+j] += a[l·ldx+i]·b[l·ldx+j] when a[l·ldx+i] != 0.
TEXT ·gramTile4x8(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ ldx+16(FP), BX
	SHLQ $3, BX
	MOVQ t+24(FP), CX
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R8
	SHLQ $3, R8
	LEAQ (DX)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	LEAQ (R10)(R8*1), R11
	VMOVUPD (DX), Y0
	VMOVUPD 32(DX), Y1
	VMOVUPD (R9), Y2
	VMOVUPD 32(R9), Y3
	VMOVUPD (R10), Y4
	VMOVUPD 32(R10), Y5
	VMOVUPD (R11), Y6
	VMOVUPD 32(R11), Y7
	VXORPD X15, X15, X15

loop:
	VMOVUPD (DI), Y8
	VMOVUPD 32(DI), Y9
	ROW(0, Y0, Y1, s0)
	ROW(8, Y2, Y3, s1)
	ROW(16, Y4, Y5, s2)
	ROW(24, Y6, Y7, s3)
	ADDQ BX, SI
	ADDQ BX, DI
	DECQ CX
	JNZ loop

	VMOVUPD Y0, (DX)
	VMOVUPD Y1, 32(DX)
	VMOVUPD Y2, (R9)
	VMOVUPD Y3, 32(R9)
	VMOVUPD Y4, (R10)
	VMOVUPD Y5, 32(R10)
	VMOVUPD Y6, (R11)
	VMOVUPD Y7, 32(R11)
	VZEROUPPER
	RET

// ROW16 adds, for row i of the 8×16 tile (a value at off(SI), the eight-value halves of C's row in lo
// and hi), a·b to both halves where a is not zero: K1 is all ones unless a == 0 (NEQ_UQ: a NaN is not
// zero), and the masked add leaves C's values as they were where it is not. The product rounded
// (VMULPD), then added (VADDPD, C the first operand), no fused multiply-add: ROW's sums.
#define ROW16(off, lo, hi) \
	VBROADCASTSD off(SI), Z18; \
	VCMPPD $4, Z31, Z18, K1; \
	VMULPD Z16, Z18, Z19; \
	VADDPD Z19, lo, K1, lo; \
	VMULPD Z17, Z18, Z20; \
	VADDPD Z20, hi, K1, hi

// func gramTile8x16(a, b *float64, ldx, t int, c *float64, ldc int)
// For l = 0..t-1 in order and the tile's rows i = 0..7 and columns j = 0..15:
// c[i·ldc+j] += a[l·ldx+i]·b[l·ldx+j] when a[l·ldx+i] != 0.
TEXT ·gramTile8x16(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ ldx+16(FP), BX
	SHLQ $3, BX
	MOVQ t+24(FP), CX
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R8
	SHLQ $3, R8
	MOVQ DX, R9
	VMOVUPD (R9), Z0
	VMOVUPD 64(R9), Z1
	ADDQ R8, R9
	VMOVUPD (R9), Z2
	VMOVUPD 64(R9), Z3
	ADDQ R8, R9
	VMOVUPD (R9), Z4
	VMOVUPD 64(R9), Z5
	ADDQ R8, R9
	VMOVUPD (R9), Z6
	VMOVUPD 64(R9), Z7
	ADDQ R8, R9
	VMOVUPD (R9), Z8
	VMOVUPD 64(R9), Z9
	ADDQ R8, R9
	VMOVUPD (R9), Z10
	VMOVUPD 64(R9), Z11
	ADDQ R8, R9
	VMOVUPD (R9), Z12
	VMOVUPD 64(R9), Z13
	ADDQ R8, R9
	VMOVUPD (R9), Z14
	VMOVUPD 64(R9), Z15
	VPXORQ Z31, Z31, Z31

loop16:
	VMOVUPD (DI), Z16
	VMOVUPD 64(DI), Z17
	ROW16(0, Z0, Z1)
	ROW16(8, Z2, Z3)
	ROW16(16, Z4, Z5)
	ROW16(24, Z6, Z7)
	ROW16(32, Z8, Z9)
	ROW16(40, Z10, Z11)
	ROW16(48, Z12, Z13)
	ROW16(56, Z14, Z15)
	ADDQ BX, SI
	ADDQ BX, DI
	DECQ CX
	JNZ loop16

	MOVQ DX, R9
	VMOVUPD Z0, (R9)
	VMOVUPD Z1, 64(R9)
	ADDQ R8, R9
	VMOVUPD Z2, (R9)
	VMOVUPD Z3, 64(R9)
	ADDQ R8, R9
	VMOVUPD Z4, (R9)
	VMOVUPD Z5, 64(R9)
	ADDQ R8, R9
	VMOVUPD Z6, (R9)
	VMOVUPD Z7, 64(R9)
	ADDQ R8, R9
	VMOVUPD Z8, (R9)
	VMOVUPD Z9, 64(R9)
	ADDQ R8, R9
	VMOVUPD Z10, (R9)
	VMOVUPD Z11, 64(R9)
	ADDQ R8, R9
	VMOVUPD Z12, (R9)
	VMOVUPD Z13, 64(R9)
	ADDQ R8, R9
	VMOVUPD Z14, (R9)
	VMOVUPD Z15, 64(R9)
	VZEROUPPER
	RET
