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
