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

// kernel4x4z keeps kernel2x4's sums for 4×4 outputs in AVX-512 registers: each zmm holds the eight-lane
// sums of two outputs of a row (Z0/Z1 row 0's outputs 0-1 and 2-3, Z2/Z3 row 1's, ...), B's rows paired
// the same way (Z16: rows 0 and 1, Z17: rows 2 and 3), a row of A broadcast to both halves. At the end
// of a slice the lanes are folded as FOLD4 folds them — lanes 4-7 into 0-3 (VSHUFF32X4, VADDPS), then
// (s0+s1)+(s2+s3) by even/odd shuffles for two rows at once — gathered into the rows' four outputs
// (VPERMPS by permidx) and added to C's values, kept in X28-X31 from one slice to the next.

DATA permidx<>+0(SB)/4, $0
DATA permidx<>+4(SB)/4, $4
DATA permidx<>+8(SB)/4, $8
DATA permidx<>+12(SB)/4, $12
DATA permidx<>+16(SB)/4, $1
DATA permidx<>+20(SB)/4, $5
DATA permidx<>+24(SB)/4, $9
DATA permidx<>+28(SB)/4, $13
DATA permidx<>+32(SB)/4, $2
DATA permidx<>+36(SB)/4, $6
DATA permidx<>+40(SB)/4, $10
DATA permidx<>+44(SB)/4, $14
DATA permidx<>+48(SB)/4, $3
DATA permidx<>+52(SB)/4, $7
DATA permidx<>+56(SB)/4, $11
DATA permidx<>+60(SB)/4, $15
GLOBL permidx<>(SB), RODATA|NOPTR, $64

// HALVES adds lanes 4-7 of each output's eight into lanes 0-3 (blocks 1 and 3 into 0 and 2).
#define HALVES(z) \
	VSHUFF32X4 $0xF5, z, z, Z24; \
	VADDPS Z24, z, z

// PAIR folds rows w (outputs in Z24: blocks 0-3 are outputs 0-3, four lanes each) and v (Z25) to
// their four outputs each and adds them to cw and cv.
#define PAIR(w, v, cw, cv) \
	VSHUFPS $0x88, v, w, Z16; \
	VSHUFPS $0xDD, v, w, Z17; \
	VADDPS Z17, Z16, Z16; \
	VSHUFPS $0x88, Z16, Z16, Z17; \
	VSHUFPS $0xDD, Z16, Z16, Z18; \
	VADDPS Z18, Z17, Z17; \
	VPERMPS Z17, Z19, Z18; \
	VADDPS X18, cw, cw; \
	VEXTRACTF32X4 $1, Z18, X17; \
	VADDPS X17, cv, cv

// ROWZ multiplies a row of A (its eight values broadcast into za) with the B pairs and adds the
// products to the row's accumulators lo (outputs 0-1) and hi (2-3).
#define ROWZ(ptr, za, lo, hi) \
	VBROADCASTF32X8 (ptr)(AX*1), za; \
	VMULPS Z16, za, Z24; \
	VADDPS Z24, lo, lo; \
	VMULPS Z17, za, Z25; \
	VADDPS Z25, hi, hi

// func kernel4x4z(a *float32, lda int, b *float32, ldb int, c *float32, ldc int, k, slice int)
TEXT ·kernel4x4z(SB), NOSPLIT, $0-64
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), BX
	SHLQ $2, BX
	LEAQ (SI)(BX*1), R8         // R8-R10: rows 1-3 of A
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), BX
	SHLQ $2, BX
	LEAQ (DI)(BX*1), R11        // R11-R13: rows 1-3 of B
	LEAQ (R11)(BX*1), R12
	LEAQ (R12)(BX*1), R13
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), BX
	SHLQ $2, BX
	MOVQ DX, R14
	VMOVUPS (R14), X28
	ADDQ BX, R14
	VMOVUPS (R14), X29
	ADDQ BX, R14
	VMOVUPS (R14), X30
	ADDQ BX, R14
	VMOVUPS (R14), X31
	VMOVDQU32 permidx<>(SB), Z19
	MOVQ k+48(FP), CX           // CX: values left
	MOVQ slice+56(FP), BX       // BX: the slice
	XORQ AX, AX                 // AX: byte offset into the rows

slice4:
	MOVQ BX, R14
	CMPQ CX, R14
	CMOVQLT CX, R14             // R14: this slice's values
	SUBQ R14, CX
	SHRQ $3, R14                // eights
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

eight4:
	VMOVUPS (DI)(AX*1), Y16
	VINSERTF32X8 $1, (R11)(AX*1), Z16, Z16
	VMOVUPS (R12)(AX*1), Y17
	VINSERTF32X8 $1, (R13)(AX*1), Z17, Z17
	ROWZ(SI, Z20, Z0, Z1)
	ROWZ(R8, Z21, Z2, Z3)
	ROWZ(R9, Z22, Z4, Z5)
	ROWZ(R10, Z23, Z6, Z7)
	ADDQ $32, AX
	DECQ R14
	JNZ eight4

	HALVES(Z0)
	HALVES(Z1)
	HALVES(Z2)
	HALVES(Z3)
	HALVES(Z4)
	HALVES(Z5)
	HALVES(Z6)
	HALVES(Z7)
	VSHUFF32X4 $0x88, Z1, Z0, Z24
	VSHUFF32X4 $0x88, Z3, Z2, Z25
	PAIR(Z24, Z25, X28, X29)
	VSHUFF32X4 $0x88, Z5, Z4, Z24
	VSHUFF32X4 $0x88, Z7, Z6, Z25
	PAIR(Z24, Z25, X30, X31)
	TESTQ CX, CX
	JNZ slice4

	MOVQ ldc+40(FP), BX
	SHLQ $2, BX
	VMOVUPS X28, (DX)
	ADDQ BX, DX
	VMOVUPS X29, (DX)
	ADDQ BX, DX
	VMOVUPS X30, (DX)
	ADDQ BX, DX
	VMOVUPS X31, (DX)
	VZEROUPPER
	RET
