#include "textflag.h"

// The kernels add, for l = 0..t-1 in order, tmp·b_l[j] to each value c[i][j] of their tile, where
// tmp = alpha·a(i, l) (or a(i, l) itself when alpha is 1) and a zero tmp is skipped: gonum's
// dgemmSerial loops with AxpyUnitary (y[j] = x[j]·tmp + y[j]: b's value first in the product, the
// product first in the sum, each rounded: no fused multiply-add). a(i, l) is at a + i·ai + l·al
// (elements), b_l at b + l·ldb, row i of the tile at c + i·ldc. The skip: a compare per row and
// token (NEQ_UQ: a NaN is not zero) into a mask that leaves C's values as they were. For alpha −1
// they subtract b·a (see the package doc); for other alphas than ±1 they multiply a by alpha first.

// ROW16 adds tmp·b (b's 16 values in Z16, Z17) to one row of the 8×16 tile (lo, hi) for the a value
// at addr; ROW16A first multiplies it by alpha (Z30).
#define ROW16(addr, lo, hi) \
	VBROADCASTSD addr, Z18; \
	VCMPPD $4, Z31, Z18, K1; \
	VMULPD Z18, Z16, Z19; \
	VADDPD lo, Z19, K1, lo; \
	VMULPD Z18, Z17, Z20; \
	VADDPD hi, Z20, K1, hi

// ROW16S is ROW16 for alpha -1: it subtracts b·a from the row (b·(−a) + c, bit for bit: see the
// package doc).
#define ROW16S(addr, lo, hi) \
	VBROADCASTSD addr, Z18; \
	VCMPPD $4, Z31, Z18, K1; \
	VMULPD Z18, Z16, Z19; \
	VSUBPD Z19, lo, K1, lo; \
	VMULPD Z18, Z17, Z20; \
	VSUBPD Z20, hi, K1, hi

// ROW16N and ROW16NS are ROW16 and ROW16S for a tile whose a values are all nonzero: no compare, no
// mask.
#define ROW16N(addr, lo, hi) \
	VBROADCASTSD addr, Z18; \
	VMULPD Z18, Z16, Z19; \
	VADDPD lo, Z19, lo; \
	VMULPD Z18, Z17, Z20; \
	VADDPD hi, Z20, hi

#define ROW16NS(addr, lo, hi) \
	VBROADCASTSD addr, Z18; \
	VMULPD Z18, Z16, Z19; \
	VSUBPD Z19, lo, lo; \
	VMULPD Z18, Z17, Z20; \
	VSUBPD Z20, hi, hi

#define ROW16A(addr, lo, hi) \
	VBROADCASTSD addr, Z18; \
	VMULPD Z18, Z30, Z18; \
	VCMPPD $4, Z31, Z18, K1; \
	VMULPD Z18, Z16, Z19; \
	VADDPD lo, Z19, K1, lo; \
	VMULPD Z18, Z17, Z20; \
	VADDPD hi, Z20, K1, hi

// TILE16(R) is one token of the 8×16 tile: b's 16 values (8 at DI, 8 at DI+R15), then the eight
// rows with row macro R (rows at SI, SI+ai, SI+2ai, R11 = SI+3ai, SI+4ai, R11+2ai, R12 = SI+6ai,
// R12+ai; R10 = ai bytes).
#define TILE16(R) \
	VMOVUPD (DI), Z16; \
	VMOVUPD (DI)(R15*1), Z17; \
	R((SI), Z0, Z1); \
	R((SI)(R10*1), Z2, Z3); \
	R((SI)(R10*2), Z4, Z5); \
	R((R11), Z6, Z7); \
	R((SI)(R10*4), Z8, Z9); \
	R((R11)(R10*2), Z10, Z11); \
	R((R12), Z12, Z13); \
	R((R12)(R10*1), Z14, Z15); \
	ADDQ R13, SI; \
	ADDQ R13, R11; \
	ADDQ R13, R12; \
	ADDQ BX, DI

// func tile8x16(a *float64, ai, al int, b *float64, ldb, bhi, t int, c *float64, ldc int, alpha float64, zeros bool)
TEXT ·tile8x16(SB), NOSPLIT, $0-81
	MOVQ a+0(FP), SI
	MOVQ ai+8(FP), R10
	SHLQ $3, R10
	MOVQ al+16(FP), R13
	SHLQ $3, R13
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), BX
	SHLQ $3, BX
	MOVQ bhi+40(FP), R15
	SHLQ $3, R15
	MOVQ t+48(FP), CX
	MOVQ c+56(FP), DX
	MOVQ ldc+64(FP), R8
	SHLQ $3, R8
	LEAQ (SI)(R10*2), R11
	ADDQ R10, R11
	LEAQ (R11)(R10*2), R12
	ADDQ R10, R12
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
	VBROADCASTSD alpha+72(FP), Z30
	TESTQ CX, CX
	JZ store16
	MOVQ alpha+72(FP), AX
	MOVBQZX zeros+80(FP), R14
	MOVQ $0x3FF0000000000000, R9
	CMPQ AX, R9
	JNE notone
	TESTQ R14, R14
	JZ loop16n
	JMP loop16

notone:
	MOVQ $0xBFF0000000000000, R9
	CMPQ AX, R9
	JNE loop16a             // alpha's bits are neither 1.0's nor -1.0's
	TESTQ R14, R14
	JZ loop16ns
	JMP loop16s

loop16n:
	TILE16(ROW16N)
	DECQ CX
	JNZ loop16n
	JMP store16

loop16ns:
	TILE16(ROW16NS)
	DECQ CX
	JNZ loop16ns
	JMP store16

loop16:
	TILE16(ROW16)
	DECQ CX
	JNZ loop16
	JMP store16

loop16s:
	TILE16(ROW16S)
	DECQ CX
	JNZ loop16s
	JMP store16

loop16a:
	TILE16(ROW16A)
	DECQ CX
	JNZ loop16a

store16:
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

// ROW8 adds tmp·b (b's 8 values in Y8, Y9) to one row of the 4×8 tile (lo, hi) for the a value at
// addr, skipping a zero tmp by a branch (AVX2 has no mask registers); ROW8A first multiplies it by
// alpha (Y14).
#define ROW8(addr, lo, hi, skip) \
	VBROADCASTSD addr, Y12; \
	VUCOMISD X15, X12; \
	JP 2(PC); \
	JE skip; \
	VMULPD Y12, Y8, Y13; \
	VADDPD lo, Y13, lo; \
	VMULPD Y12, Y9, Y13; \
	VADDPD hi, Y13, hi; \
skip:

// ROW8S is ROW8 for alpha -1: it subtracts b·a from the row.
#define ROW8S(addr, lo, hi, skip) \
	VBROADCASTSD addr, Y12; \
	VUCOMISD X15, X12; \
	JP 2(PC); \
	JE skip; \
	VMULPD Y12, Y8, Y13; \
	VSUBPD Y13, lo, lo; \
	VMULPD Y12, Y9, Y13; \
	VSUBPD Y13, hi, hi; \
skip:

#define ROW8A(addr, lo, hi, skip) \
	VBROADCASTSD addr, Y12; \
	VMULPD Y12, Y14, Y12; \
	VUCOMISD X15, X12; \
	JP 2(PC); \
	JE skip; \
	VMULPD Y12, Y8, Y13; \
	VADDPD lo, Y13, lo; \
	VMULPD Y12, Y9, Y13; \
	VADDPD hi, Y13, hi; \
skip:

// ROW8N and ROW8NS are ROW8 and ROW8S for a tile whose a values are all nonzero: no compare, no
// branch. The labels are unused.
#define ROW8N(addr, lo, hi, skip) \
	VBROADCASTSD addr, Y12; \
	VMULPD Y12, Y8, Y13; \
	VADDPD lo, Y13, lo; \
	VMULPD Y12, Y9, Y13; \
	VADDPD hi, Y13, hi

#define ROW8NS(addr, lo, hi, skip) \
	VBROADCASTSD addr, Y12; \
	VMULPD Y12, Y8, Y13; \
	VSUBPD Y13, lo, lo; \
	VMULPD Y12, Y9, Y13; \
	VSUBPD Y13, hi, hi

// TILE8(R, l0, l1, l2, l3) is one token of the 4×8 tile: b's 8 values, then the four rows with row
// macro R (rows at SI, SI+ai, SI+2ai, R11 = SI+3ai; l0-l3 their skip labels).
#define TILE8(R, l0, l1, l2, l3) \
	VMOVUPD (DI), Y8; \
	VMOVUPD 32(DI), Y9; \
	R((SI), Y0, Y1, l0); \
	R((SI)(R10*1), Y2, Y3, l1); \
	R((SI)(R10*2), Y4, Y5, l2); \
	R((R11), Y6, Y7, l3); \
	ADDQ R13, SI; \
	ADDQ R13, R11; \
	ADDQ BX, DI

// func tile4x8(a *float64, ai, al int, b *float64, ldb, t int, c *float64, ldc int, alpha float64, zeros bool)
// Rows of a at SI, SI+ai, SI+2ai, R11 = SI+3ai.
TEXT ·tile4x8(SB), NOSPLIT, $0-73
	MOVQ a+0(FP), SI
	MOVQ ai+8(FP), R10
	SHLQ $3, R10
	MOVQ al+16(FP), R13
	SHLQ $3, R13
	MOVQ b+24(FP), DI
	MOVQ ldb+32(FP), BX
	SHLQ $3, BX
	MOVQ t+40(FP), CX
	MOVQ c+48(FP), DX
	MOVQ ldc+56(FP), R8
	SHLQ $3, R8
	LEAQ (SI)(R10*2), R11
	ADDQ R10, R11
	MOVQ DX, R9
	VMOVUPD (R9), Y0
	VMOVUPD 32(R9), Y1
	ADDQ R8, R9
	VMOVUPD (R9), Y2
	VMOVUPD 32(R9), Y3
	ADDQ R8, R9
	VMOVUPD (R9), Y4
	VMOVUPD 32(R9), Y5
	ADDQ R8, R9
	VMOVUPD (R9), Y6
	VMOVUPD 32(R9), Y7
	VXORPD X15, X15, X15
	VBROADCASTSD alpha+64(FP), Y14
	TESTQ CX, CX
	JZ store8
	MOVQ alpha+64(FP), AX
	MOVBQZX zeros+72(FP), R14
	MOVQ $0x3FF0000000000000, R9
	CMPQ AX, R9
	JNE notone8
	TESTQ R14, R14
	JZ loop8n
	JMP loop8

notone8:
	MOVQ $0xBFF0000000000000, R9
	CMPQ AX, R9
	JNE loop8a              // alpha's bits are neither 1.0's nor -1.0's
	TESTQ R14, R14
	JZ loop8ns
	JMP loop8s

loop8n:
	TILE8(ROW8N, x0, x1, x2, x3)
	DECQ CX
	JNZ loop8n
	JMP store8

loop8ns:
	TILE8(ROW8NS, y0, y1, y2, y3)
	DECQ CX
	JNZ loop8ns
	JMP store8

loop8:
	TILE8(ROW8, s0, s1, s2, s3)
	DECQ CX
	JNZ loop8
	JMP store8

loop8s:
	TILE8(ROW8S, n0, n1, n2, n3)
	DECQ CX
	JNZ loop8s
	JMP store8

loop8a:
	TILE8(ROW8A, a0, a1, a2, a3)
	DECQ CX
	JNZ loop8a

store8:
	MOVQ DX, R9
	VMOVUPD Y0, (R9)
	VMOVUPD Y1, 32(R9)
	ADDQ R8, R9
	VMOVUPD Y2, (R9)
	VMOVUPD Y3, 32(R9)
	ADDQ R8, R9
	VMOVUPD Y4, (R9)
	VMOVUPD Y5, 32(R9)
	ADDQ R8, R9
	VMOVUPD Y6, (R9)
	VMOVUPD Y7, 32(R9)
	VZEROUPPER
	RET

// func nonzero8(a *float64, ai, al, t int) bool
TEXT ·nonzero8(SB), NOSPLIT, $0-33
	MOVQ a+0(FP), SI
	MOVQ ai+8(FP), R10
	MOVQ al+16(FP), R13
	MOVQ t+24(FP), CX
	MOVQ $0x7FFFFFFFFFFFFFFF, AX  // every bit but the sign: zero for ±0 only
	VPBROADCASTQ AX, Z31
	TESTQ CX, CX
	JZ yes
	CMPQ R10, $1
	JNE rows
	SHLQ $3, R13

tokens:                         // ai 1: a token's 8 values are consecutive, tokens al apart
	VPTESTMQ (SI), Z31, K1
	KMOVW K1, R9
	CMPQ R9, $0xFF
	JNE zero
	ADDQ R13, SI
	DECQ CX
	JNZ tokens
	JMP yes

rows:                           // al 1: 8 rows of t consecutive values, ai apart
	SHLQ $3, R10
	MOVQ $8, R8

row:
	MOVQ SI, DI
	MOVQ CX, DX

eights:
	CMPQ DX, $8
	JLT tail
	VPTESTMQ (DI), Z31, K1
	KMOVW K1, R9
	CMPQ R9, $0xFF
	JNE zero
	ADDQ $64, DI
	SUBQ $8, DX
	JMP eights

tail:
	TESTQ DX, DX
	JZ nextrow
	MOVQ (DI), R9
	TESTQ AX, R9
	JZ zero
	ADDQ $8, DI
	DECQ DX
	JMP tail

nextrow:
	ADDQ R10, SI
	DECQ R8
	JNZ row

yes:
	MOVB $1, ret+32(FP)
	VZEROUPPER
	RET

zero:
	MOVB $0, ret+32(FP)
	VZEROUPPER
	RET

// func prefetch8x16(c *float64, ldc int)
TEXT ·prefetch8x16(SB), NOSPLIT, $0-16
	MOVQ c+0(FP), SI
	MOVQ ldc+8(FP), BX
	SHLQ $3, BX
	LEAQ (SI)(BX*4), DI         // DI: row 4
	LEAQ (BX)(BX*2), CX         // CX: three rows, in bytes
	PREFETCHT0 (SI)
	PREFETCHT0 64(SI)
	PREFETCHT0 (SI)(BX*1)
	PREFETCHT0 64(SI)(BX*1)
	PREFETCHT0 (SI)(BX*2)
	PREFETCHT0 64(SI)(BX*2)
	PREFETCHT0 (SI)(CX*1)
	PREFETCHT0 64(SI)(CX*1)
	PREFETCHT0 (DI)
	PREFETCHT0 64(DI)
	PREFETCHT0 (DI)(BX*1)
	PREFETCHT0 64(DI)(BX*1)
	PREFETCHT0 (DI)(BX*2)
	PREFETCHT0 64(DI)(BX*2)
	PREFETCHT0 (DI)(CX*1)
	PREFETCHT0 64(DI)(CX*1)
	RET

// func nonzero4(a *float64, ai, al, t int) bool
//
// nonzero8 for 4 rows, on AVX2: a value is zero when its bits but the sign are all 0 (VPAND with
// every bit but the sign, VPCMPEQQ against 0: a lane of ones for a zero; VPTEST finds any).
TEXT ·nonzero4(SB), NOSPLIT, $0-33
	MOVQ a+0(FP), SI
	MOVQ ai+8(FP), R10
	MOVQ al+16(FP), R13
	MOVQ t+24(FP), CX
	MOVQ $0x7FFFFFFFFFFFFFFF, AX
	MOVQ AX, X15
	VPBROADCASTQ X15, Y15
	VPXOR Y14, Y14, Y14
	TESTQ CX, CX
	JZ yes4
	CMPQ R10, $1
	JNE rows4
	SHLQ $3, R13

tokens4:                        // ai 1: a token's 4 values are consecutive, tokens al apart
	VPAND (SI), Y15, Y0
	VPCMPEQQ Y14, Y0, Y0
	VPTEST Y0, Y0
	JNZ zero4
	ADDQ R13, SI
	DECQ CX
	JNZ tokens4
	JMP yes4

rows4:                          // al 1: 4 rows of t consecutive values, ai apart
	SHLQ $3, R10
	MOVQ $4, R8

row4:
	MOVQ SI, DI
	MOVQ CX, DX

fours:
	CMPQ DX, $4
	JLT tail4
	VPAND (DI), Y15, Y0
	VPCMPEQQ Y14, Y0, Y0
	VPTEST Y0, Y0
	JNZ zero4
	ADDQ $32, DI
	SUBQ $4, DX
	JMP fours

tail4:
	TESTQ DX, DX
	JZ nextrow4
	MOVQ (DI), R9
	TESTQ AX, R9
	JZ zero4
	ADDQ $8, DI
	DECQ DX
	JMP tail4

nextrow4:
	ADDQ R10, SI
	DECQ R8
	JNZ row4

yes4:
	MOVB $1, ret+32(FP)
	VZEROUPPER
	RET

zero4:
	MOVB $0, ret+32(FP)
	VZEROUPPER
	RET
