#include "textflag.h"

// The Gram tile kernels (gram_amd64.go; the product kernels, below, share their loop). Each lane is one row of codes, so a lane's arithmetic does
// not depend on the register width: per column j of a chunk, acc_j = fma(ci_i, h_ij, acc_j) over
// i (the row's codes of group h times the block's column j, from +0), then after the chunk's rows
// g = fma(acc_j, cj_j, g) over its columns in order. The chunk's accumulators stay in registers
// while the block's rows stream past (one broadcast of h_ij serves two registers of rows).
//
// Registers: DI the chunk's first column of h, R8 hs in bytes, R9 gi, R10 chunks left, SI ci,
// R13 the next column of cj, R11 cs in bytes, BX out; AX and CX walk h and ci down the rows of the
// chunk, R12 counts them. R14 is gw in bytes: each row of the chunk prefetches the same columns of
// the next block to the right, the block gramProducts asks for next for these rows.

#define STEP512(off, b, acc0, acc1) \
	VBROADCASTSD off(AX), b; \
	VFMADD231PD b, Z16, acc0; \
	VFMADD231PD b, Z17, acc1

#define DOT512(acc0, acc1) \
	VMOVUPD (R13), Z18; \
	VMOVUPD 64(R13), Z19; \
	VFMADD231PD Z18, acc0, Z20; \
	VFMADD231PD Z19, acc1, Z21; \
	ADDQ R11, R13

// func GramTile16(h *float64, hs, gi, gw int, ci, cj *float64, cs int, out *float64)
//
// Sixteen rows in Z16/Z17 (ci) and Z18/Z19 (cj); chunks of eight columns, their accumulators in
// Z0-Z15 (column j's two registers Z2j, Z2j+1), broadcasts in Z22-Z29, the sums in Z20/Z21.
TEXT ·GramTile16(SB), NOSPLIT, $0-64
	MOVQ h+0(FP), DI
	MOVQ hs+8(FP), R8
	SHLQ $3, R8
	MOVQ gi+16(FP), R9
	MOVQ gw+24(FP), R10
	LEAQ (R10*8), R14
	SHRQ $3, R10
	MOVQ ci+32(FP), SI
	MOVQ cj+40(FP), R13
	MOVQ cs+48(FP), R11
	SHLQ $3, R11
	MOVQ out+56(FP), BX
	VPXORQ Z20, Z20, Z20
	VPXORQ Z21, Z21, Z21

chunk16:
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	VPXORQ Z4, Z4, Z4
	VPXORQ Z5, Z5, Z5
	VPXORQ Z6, Z6, Z6
	VPXORQ Z7, Z7, Z7
	VPXORQ Z8, Z8, Z8
	VPXORQ Z9, Z9, Z9
	VPXORQ Z10, Z10, Z10
	VPXORQ Z11, Z11, Z11
	VPXORQ Z12, Z12, Z12
	VPXORQ Z13, Z13, Z13
	VPXORQ Z14, Z14, Z14
	VPXORQ Z15, Z15, Z15
	MOVQ DI, AX
	MOVQ SI, CX
	MOVQ R9, R12

row16:
	PREFETCHT0 (AX)(R14*1)
	VMOVUPD (CX), Z16
	VMOVUPD 64(CX), Z17
	STEP512(0, Z22, Z0, Z1)
	STEP512(8, Z23, Z2, Z3)
	STEP512(16, Z24, Z4, Z5)
	STEP512(24, Z25, Z6, Z7)
	STEP512(32, Z26, Z8, Z9)
	STEP512(40, Z27, Z10, Z11)
	STEP512(48, Z28, Z12, Z13)
	STEP512(56, Z29, Z14, Z15)
	ADDQ R8, AX
	ADDQ R11, CX
	DECQ R12
	JNZ row16

	DOT512(Z0, Z1)
	DOT512(Z2, Z3)
	DOT512(Z4, Z5)
	DOT512(Z6, Z7)
	DOT512(Z8, Z9)
	DOT512(Z10, Z11)
	DOT512(Z12, Z13)
	DOT512(Z14, Z15)
	ADDQ $64, DI
	DECQ R10
	JNZ chunk16

	VMOVUPD Z20, (BX)
	VMOVUPD Z21, 64(BX)
	VZEROUPPER
	RET

#define STEP256(off, b, acc0, acc1) \
	VBROADCASTSD off(AX), b; \
	VFMADD231PD b, Y8, acc0; \
	VFMADD231PD b, Y9, acc1

#define DOT256(acc0, acc1) \
	VMOVUPD (R13), Y12; \
	VMOVUPD 32(R13), Y13; \
	VFMADD231PD Y12, acc0, Y14; \
	VFMADD231PD Y13, acc1, Y15; \
	ADDQ R11, R13

// func GramTile8(h *float64, hs, gi, gw int, ci, cj *float64, cs int, out *float64)
//
// Eight rows in Y8/Y9 (ci) and Y12/Y13 (cj); chunks of four columns, their accumulators in Y0-Y7,
// broadcasts in Y10/Y11, the sums in Y14/Y15.
TEXT ·GramTile8(SB), NOSPLIT, $0-64
	MOVQ h+0(FP), DI
	MOVQ hs+8(FP), R8
	SHLQ $3, R8
	MOVQ gi+16(FP), R9
	MOVQ gw+24(FP), R10
	LEAQ (R10*8), R14
	SHRQ $2, R10
	MOVQ ci+32(FP), SI
	MOVQ cj+40(FP), R13
	MOVQ cs+48(FP), R11
	SHLQ $3, R11
	MOVQ out+56(FP), BX
	VXORPD Y14, Y14, Y14
	VXORPD Y15, Y15, Y15

chunk8:
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	VXORPD Y4, Y4, Y4
	VXORPD Y5, Y5, Y5
	VXORPD Y6, Y6, Y6
	VXORPD Y7, Y7, Y7
	MOVQ DI, AX
	MOVQ SI, CX
	MOVQ R9, R12

row8:
	PREFETCHT0 (AX)(R14*1)
	VMOVUPD (CX), Y8
	VMOVUPD 32(CX), Y9
	STEP256(0, Y10, Y0, Y1)
	STEP256(8, Y11, Y2, Y3)
	STEP256(16, Y10, Y4, Y5)
	STEP256(24, Y11, Y6, Y7)
	ADDQ R8, AX
	ADDQ R11, CX
	DECQ R12
	JNZ row8

	DOT256(Y0, Y1)
	DOT256(Y2, Y3)
	DOT256(Y4, Y5)
	DOT256(Y6, Y7)
	ADDQ $32, DI
	DECQ R10
	JNZ chunk8

	VMOVUPD Y14, (BX)
	VMOVUPD Y15, 32(BX)
	VZEROUPPER
	RET

// The product kernels: GramTile's accumulators without the dot, each chunk's eight (four) columns of
// y loaded into them first and stored back after the block's rows. BX keeps the chunk's first column
// of y for the stores; R13 walks the columns for the loads, ending at the next chunk's.

#define LOAD512(acc0, acc1) \
	VMOVUPD (R13), acc0; \
	VMOVUPD 64(R13), acc1; \
	ADDQ R11, R13

#define STORE512(acc0, acc1) \
	VMOVUPD acc0, (BX); \
	VMOVUPD acc1, 64(BX); \
	ADDQ R11, BX

// func MulTile16(h *float64, hs, gi, gw int, ci, y *float64, cs int)
TEXT ·MulTile16(SB), NOSPLIT, $0-56
	MOVQ h+0(FP), DI
	MOVQ hs+8(FP), R8
	SHLQ $3, R8
	MOVQ gi+16(FP), R9
	MOVQ gw+24(FP), R10
	LEAQ (R10*8), R14
	SHRQ $3, R10
	MOVQ ci+32(FP), SI
	MOVQ y+40(FP), R13
	MOVQ cs+48(FP), R11
	SHLQ $3, R11

mchunk16:
	MOVQ R13, BX
	LOAD512(Z0, Z1)
	LOAD512(Z2, Z3)
	LOAD512(Z4, Z5)
	LOAD512(Z6, Z7)
	LOAD512(Z8, Z9)
	LOAD512(Z10, Z11)
	LOAD512(Z12, Z13)
	LOAD512(Z14, Z15)
	MOVQ DI, AX
	MOVQ SI, CX
	MOVQ R9, R12

mrow16:
	PREFETCHT0 (AX)(R14*1)
	VMOVUPD (CX), Z16
	VMOVUPD 64(CX), Z17
	STEP512(0, Z22, Z0, Z1)
	STEP512(8, Z23, Z2, Z3)
	STEP512(16, Z24, Z4, Z5)
	STEP512(24, Z25, Z6, Z7)
	STEP512(32, Z26, Z8, Z9)
	STEP512(40, Z27, Z10, Z11)
	STEP512(48, Z28, Z12, Z13)
	STEP512(56, Z29, Z14, Z15)
	ADDQ R8, AX
	ADDQ R11, CX
	DECQ R12
	JNZ mrow16

	STORE512(Z0, Z1)
	STORE512(Z2, Z3)
	STORE512(Z4, Z5)
	STORE512(Z6, Z7)
	STORE512(Z8, Z9)
	STORE512(Z10, Z11)
	STORE512(Z12, Z13)
	STORE512(Z14, Z15)
	ADDQ $64, DI
	DECQ R10
	JNZ mchunk16
	VZEROUPPER
	RET

#define LOAD256(acc0, acc1) \
	VMOVUPD (R13), acc0; \
	VMOVUPD 32(R13), acc1; \
	ADDQ R11, R13

#define STORE256(acc0, acc1) \
	VMOVUPD acc0, (BX); \
	VMOVUPD acc1, 32(BX); \
	ADDQ R11, BX

// func MulTile8(h *float64, hs, gi, gw int, ci, y *float64, cs int)
TEXT ·MulTile8(SB), NOSPLIT, $0-56
	MOVQ h+0(FP), DI
	MOVQ hs+8(FP), R8
	SHLQ $3, R8
	MOVQ gi+16(FP), R9
	MOVQ gw+24(FP), R10
	LEAQ (R10*8), R14
	SHRQ $2, R10
	MOVQ ci+32(FP), SI
	MOVQ y+40(FP), R13
	MOVQ cs+48(FP), R11
	SHLQ $3, R11

mchunk8:
	MOVQ R13, BX
	LOAD256(Y0, Y1)
	LOAD256(Y2, Y3)
	LOAD256(Y4, Y5)
	LOAD256(Y6, Y7)
	MOVQ DI, AX
	MOVQ SI, CX
	MOVQ R9, R12

mrow8:
	PREFETCHT0 (AX)(R14*1)
	VMOVUPD (CX), Y8
	VMOVUPD 32(CX), Y9
	STEP256(0, Y10, Y0, Y1)
	STEP256(8, Y11, Y2, Y3)
	STEP256(16, Y10, Y4, Y5)
	STEP256(24, Y11, Y6, Y7)
	ADDQ R8, AX
	ADDQ R11, CX
	DECQ R12
	JNZ mrow8

	STORE256(Y0, Y1)
	STORE256(Y2, Y3)
	STORE256(Y4, Y5)
	STORE256(Y6, Y7)
	ADDQ $32, DI
	DECQ R10
	JNZ mchunk8
	VZEROUPPER
	RET
