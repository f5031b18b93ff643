#include "textflag.h"

// The kernels keep one eight-lane sum a output (Y0-Y3 for the first row of A, Y4-Y7 for the second),
// lane l summing the products at l mod 8 of the slice, eight values at a time: the values of the four
// rows of B in Y8-Y11, of a row of A in Y12, each product in Y13 rounded before it is added (VMULPS,
// then VADDPS: no fused multiply-add). At the end of a slice each sum is folded as gonum's DotUnitary
// folds it — lanes 4-7 added into 0-3, then (s0+s1)+(s2+s3) by two horizontal adds, four outputs at
// once — and added to that row's four outputs, kept in X14 (first row) and X15 (second) from one
// slice to the next. Operands keep DotUnitary's order: x·y with A's value first, sum + product,
// output + slice sum.

// FOLD4 leaves in X8 the four slice sums of the eight-lane sums ya, yb, yc, yd (outputs 0-3 of a row;
// xa-xd are their low halves).
#define FOLD4(ya, xa, yb, xb, yc, xc, yd, xd) \
	VEXTRACTF128 $1, ya, X8; \
	VADDPS X8, xa, xa; \
	VEXTRACTF128 $1, yb, X9; \
	VADDPS X9, xb, xb; \
	VEXTRACTF128 $1, yc, X10; \
	VADDPS X10, xc, xc; \
	VEXTRACTF128 $1, yd, X11; \
	VADDPS X11, xd, xd; \
	VHADDPS xb, xa, X8; \
	VHADDPS xd, xc, X9; \
	VHADDPS X9, X8, X8

// func kernel2x4(a *float32, lda int, b *float32, ldb int, c *float32, ldc int, k, slice int)
TEXT ·kernel2x4(SB), NOSPLIT, $0-64
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), R8
	SHLQ $2, R8
	ADDQ SI, R8                 // R8: the second row of A
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), BX
	SHLQ $2, BX
	LEAQ (DI)(BX*1), R9         // R9-R11: rows 1-3 of B
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R12
	SHLQ $2, R12
	ADDQ DX, R12                // R12: the second row of C
	MOVQ k+48(FP), CX           // CX: values left
	MOVQ slice+56(FP), R13
	VMOVUPS (DX), X14
	VMOVUPS (R12), X15
	XORQ AX, AX                 // AX: byte offset into the rows

slice2:
	MOVQ R13, R14
	CMPQ CX, R14
	CMOVQLT CX, R14             // R14: this slice's values
	SUBQ R14, CX
	SHRQ $3, R14                // eights
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

eight2:
	VMOVUPS (DI)(AX*1), Y8
	VMOVUPS (R9)(AX*1), Y9
	VMOVUPS (R10)(AX*1), Y10
	VMOVUPS (R11)(AX*1), Y11
	VMOVUPS (SI)(AX*1), Y12
	VMULPS Y8, Y12, Y13
	VADDPS Y13, Y0, Y0
	VMULPS Y9, Y12, Y13
	VADDPS Y13, Y1, Y1
	VMULPS Y10, Y12, Y13
	VADDPS Y13, Y2, Y2
	VMULPS Y11, Y12, Y13
	VADDPS Y13, Y3, Y3
	VMOVUPS (R8)(AX*1), Y12
	VMULPS Y8, Y12, Y13
	VADDPS Y13, Y4, Y4
	VMULPS Y9, Y12, Y13
	VADDPS Y13, Y5, Y5
	VMULPS Y10, Y12, Y13
	VADDPS Y13, Y6, Y6
	VMULPS Y11, Y12, Y13
	VADDPS Y13, Y7, Y7
	ADDQ $32, AX
	DECQ R14
	JNZ eight2

	FOLD4(Y0, X0, Y1, X1, Y2, X2, Y3, X3)
	VADDPS X8, X14, X14
	FOLD4(Y4, X4, Y5, X5, Y6, X6, Y7, X7)
	VADDPS X8, X15, X15
	TESTQ CX, CX
	JNZ slice2

	VMOVUPS X14, (DX)
	VMOVUPS X15, (R12)
	VZEROUPPER
	RET

// func kernel1x4(a *float32, b *float32, ldb int, c *float32, k, slice int)
TEXT ·kernel1x4(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ ldb+16(FP), BX
	SHLQ $2, BX
	LEAQ (DI)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	MOVQ c+24(FP), DX
	MOVQ k+32(FP), CX
	MOVQ slice+40(FP), R13
	VMOVUPS (DX), X14
	XORQ AX, AX

slice1:
	MOVQ R13, R14
	CMPQ CX, R14
	CMOVQLT CX, R14
	SUBQ R14, CX
	SHRQ $3, R14
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

eight1:
	VMOVUPS (SI)(AX*1), Y12
	VMULPS (DI)(AX*1), Y12, Y13
	VADDPS Y13, Y0, Y0
	VMULPS (R9)(AX*1), Y12, Y13
	VADDPS Y13, Y1, Y1
	VMULPS (R10)(AX*1), Y12, Y13
	VADDPS Y13, Y2, Y2
	VMULPS (R11)(AX*1), Y12, Y13
	VADDPS Y13, Y3, Y3
	ADDQ $32, AX
	DECQ R14
	JNZ eight1

	FOLD4(Y0, X0, Y1, X1, Y2, X2, Y3, X3)
	VADDPS X8, X14, X14
	TESTQ CX, CX
	JNZ slice1

	VMOVUPS X14, (DX)
	VZEROUPPER
	RET
