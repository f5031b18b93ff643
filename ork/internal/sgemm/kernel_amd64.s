#include "textflag.h"

// The kernels keep one eight-lane sum a output (Y0-Y3 for the first row of A, Y4-Y7 for the second),
// lane l summing the products at l mod 8 of the slice, eight values at a time: the values of the four
// rows of B in Y8-Y11, of a row of A in Y12, each product in Y13 rounded before it is added (VMULPS,
// then VADDPS: no fused multiply-add). At the end of a slice each sum is folded as gonum's DotUnitary
// folds it — lanes 4-7 added into 0-3, then (s0+s1)+(s2+s3) by two horizontal adds, four outputs at
// once — and added to that row's four outputs, kept in X14 (first row) and X15 (second) from one
// slice to the next. Operands keep gonum's order, which decides which of two NaNs' payloads a sum
// keeps: x·y with A's value first, sum + product, and slice sum + output (its compiled
// c += alpha·sum; TestNaNPayloads).

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
	VADDPS X14, X8, X14
	FOLD4(Y4, X4, Y5, X5, Y6, X6, Y7, X7)
	VADDPS X15, X8, X15
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
	VADDPS X14, X8, X14
	TESTQ CX, CX
	JNZ slice1

	VMOVUPS X14, (DX)
	VZEROUPPER
	RET

// The AVX-512 kernels keep kernel2x4's sums in zmm registers: each holds the eight-lane sums of two
// outputs of a row (for kernel4x4z Z0/Z1 row 0's outputs 0-1 and 2-3, Z2/Z3 row 1's, ...), B's rows
// paired the same way (the eight values of row 0 in the low half, of row 1 in the high half), a row of
// A broadcast to both halves. At the end of a slice FOLD folds four rows' sums as FOLD4 folds them and
// adds them to C's values, kept a row a 128-bit block in one register from one slice to the next.

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

// HALF leaves in lo the sums s[l]+s[l+4], l = 0-3, of a row's four outputs (lo: the eight-lane sums of
// outputs 0-1, hi: of 2-3), output o in block o: the low blocks of each output gathered into Z24, the
// high ones into Z25, added.
#define HALF(lo, hi) \
	VSHUFF32X4 $0x88, hi, lo, Z24; \
	VSHUFF32X4 $0xDD, hi, lo, Z25; \
	VADDPS Z25, Z24, lo

// FOLD adds to cz (row r's four outputs in block r) the slice sums of rows 0-3 (row r's eight-lane sums
// in ar, outputs 0-1, and br, 2-3): HALF each row; then in every block (an output) (s0+s1) and
// (s2+s3) of two rows by even/odd shuffles, Z16 rows 0-1 and Z18 rows 2-3; then their sums, the four
// rows' slice sums of each output in Z17; transposed by VPERMPS (idx: permidx) to rows of outputs.
// Z16-Z18, Z20, Z24 and Z25 are overwritten.
#define FOLD(a0, b0, a1, b1, a2, b2, a3, b3, idx, cz) \
	HALF(a0, b0); \
	HALF(a1, b1); \
	HALF(a2, b2); \
	HALF(a3, b3); \
	VSHUFPS $0x88, a1, a0, Z16; \
	VSHUFPS $0xDD, a1, a0, Z17; \
	VADDPS Z17, Z16, Z16; \
	VSHUFPS $0x88, a3, a2, Z18; \
	VSHUFPS $0xDD, a3, a2, Z17; \
	VADDPS Z17, Z18, Z18; \
	VSHUFPS $0x88, Z18, Z16, Z17; \
	VSHUFPS $0xDD, Z18, Z16, Z20; \
	VADDPS Z20, Z17, Z17; \
	VPERMPS Z17, idx, Z18; \
	VADDPS cz, Z18, cz

// LOADC and STOREC move four rows of four outputs at off(DX) (rows BX bytes apart) into and out of
// the blocks of cz; R14 is overwritten.
#define LOADC(off, cz, xz) \
	MOVQ DX, R14; \
	VMOVUPS off(R14), xz; \
	ADDQ BX, R14; \
	VINSERTF32X4 $1, off(R14), cz, cz; \
	ADDQ BX, R14; \
	VINSERTF32X4 $2, off(R14), cz, cz; \
	ADDQ BX, R14; \
	VINSERTF32X4 $3, off(R14), cz, cz

#define STOREC(off, cz, xz) \
	MOVQ DX, R14; \
	VMOVUPS xz, off(R14); \
	ADDQ BX, R14; \
	VEXTRACTF32X4 $1, cz, off(R14); \
	ADDQ BX, R14; \
	VEXTRACTF32X4 $2, cz, off(R14); \
	ADDQ BX, R14; \
	VEXTRACTF32X4 $3, cz, off(R14)

// ROWZ multiplies a row of A (its eight values broadcast into za) with the B pairs in Z16 and Z17 and
// adds the products to the row's accumulators lo and hi.
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
	SHLQ $2, BX                 // BX: C's row stride in bytes, then the slice
	LOADC(0, Z28, X28)
	VMOVDQU32 permidx<>(SB), Z30
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

	FOLD(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z30, Z28)
	TESTQ CX, CX
	JNZ slice4

	MOVQ ldc+40(FP), BX
	SHLQ $2, BX
	STOREC(0, Z28, X28)
	VZEROUPPER
	RET
