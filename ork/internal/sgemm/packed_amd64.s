#include "textflag.h"

// kernel3x16 and kernel1x16 keep DotUnitary's eight lanes of an output in four registers, two lanes
// a register: sixteen rows of B are packed (pack16) as two groups of eight, group 0 the rows
// 0, 1, 4, 5, 8, 9, 12 and 13, group 1 the others, and for each pair of positions (2q, 2q+1) of K a
// group's eight rows' values at them, a row's pair after the other's (64 bytes). A row of A's pair
// at 2q is broadcast to all eight pairs of a register (VBROADCASTSD, a load with no shuffle) and
// multiplied with a group's (VMULPS, then VADDPS: no fused multiply-add; A's value first, sum +
// product) into register q of the row and group: its lanes 2r and 2r+1 sum the products at 2q and
// 2q+1 mod 8 with the group's r-th row of B. At the end of a slice the registers fold as
// DotUnitary folds its lanes: l + (l+4) is register q + register q+2 (q = 0, 1), lane by lane;
// s0+s1 and s2+s3 are the sums of a register's adjacent lanes, gathered from both groups by
// even/odd shuffles (whence the groups' rows: the sums land in the order of C's sixteen values);
// then (s0+s1)+(s2+s3), and the slice sums + C's values (the order of gonum's compiled
// c += alpha·sum, which decides which of two NaNs' payloads a sum keeps: TestNaNPayloads).

// PAIR multiplies the pairs of the three rows at aoff with the two groups' pairs at boff and adds
// the products to the rows' registers: g0r0, g1r0 (row 0, groups 0 and 1), g0r1, g1r1, g0r2, g1r2.
#define PAIR(aoff, boff, g0r0, g1r0, g0r1, g1r1, g0r2, g1r2) \
	VMOVUPS boff(DI), Z24; \
	VMOVUPS (boff+64)(DI), Z25; \
	VBROADCASTSD aoff(SI)(AX*1), Z26; \
	VBROADCASTSD aoff(R8)(AX*1), Z27; \
	VBROADCASTSD aoff(R9)(AX*1), Z28; \
	VMULPS Z24, Z26, Z29; \
	VADDPS Z29, g0r0, g0r0; \
	VMULPS Z25, Z26, Z26; \
	VADDPS Z26, g1r0, g1r0; \
	VMULPS Z24, Z27, Z29; \
	VADDPS Z29, g0r1, g0r1; \
	VMULPS Z25, Z27, Z27; \
	VADDPS Z27, g1r1, g1r1; \
	VMULPS Z24, Z28, Z29; \
	VADDPS Z29, g0r2, g0r2; \
	VMULPS Z25, Z28, Z28; \
	VADDPS Z28, g1r2, g1r2

// FOLD16 adds the slice sums of a row to the sixteen values of C at ptr: a0-a3 its registers 0-3
// of group 0, b0-b3 of group 1 (a0, a1, b0, b1 are overwritten; Z29-Z31 too).
#define FOLD16(a0, a1, a2, a3, b0, b1, b2, b3, ptr) \
	VADDPS a2, a0, a0; \
	VADDPS a3, a1, a1; \
	VADDPS b2, b0, b0; \
	VADDPS b3, b1, b1; \
	VSHUFPS $0x88, b0, a0, Z29; \
	VSHUFPS $0xDD, b0, a0, Z30; \
	VADDPS Z30, Z29, Z29; \
	VSHUFPS $0x88, b1, a1, Z30; \
	VSHUFPS $0xDD, b1, a1, Z31; \
	VADDPS Z31, Z30, Z30; \
	VADDPS Z30, Z29, Z29; \
	VMOVUPS (ptr), Z30; \
	VADDPS Z30, Z29, Z30; \
	VMOVUPS Z30, (ptr)

// EIGHT3 runs PAIR over the four pairs of an eight of K.
#define EIGHT3 \
	PAIR(0, 0, Z0, Z4, Z8, Z12, Z16, Z20); \
	PAIR(8, 128, Z1, Z5, Z9, Z13, Z17, Z21); \
	PAIR(16, 256, Z2, Z6, Z10, Z14, Z18, Z22); \
	PAIR(24, 384, Z3, Z7, Z11, Z15, Z19, Z23)

// func kernel3x16(a *float32, lda int, pb *float32, c *float32, ldc int, k, slice int, next *float32)
TEXT ·kernel3x16(SB), NOSPLIT, $0-64
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), BX
	SHLQ $2, BX
	LEAQ (SI)(BX*1), R8         // R8, R9: rows 1 and 2 of A
	LEAQ (R8)(BX*1), R9
	MOVQ pb+16(FP), DI          // DI: the packed pairs, 512 bytes an eight of K
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), BX
	SHLQ $2, BX
	LEAQ (DX)(BX*1), R10        // R10, R11: rows 1 and 2 of C
	LEAQ (R10)(BX*1), R11
	MOVQ next+56(FP), R12       // R12: the next rows' values at this eight, or nil
	MOVQ lda+8(FP), R13
	SHLQ $2, R13                // R13: A's row stride in bytes
	MOVQ k+40(FP), CX           // CX: values left
	MOVQ slice+48(FP), BX       // BX: the slice
	XORQ AX, AX                 // AX: byte offset into A's rows

slice3:
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
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

	TESTQ R12, R12
	JNZ prefetch3

eight3:
	EIGHT3
	ADDQ $32, AX
	ADDQ $512, DI
	DECQ R14
	JNZ eight3
	JMP fold3

prefetch3:
	PREFETCHT0 (R12)
	PREFETCHT0 (R12)(R13*1)
	PREFETCHT0 (R12)(R13*2)
	EIGHT3
	ADDQ $32, R12
	ADDQ $32, AX
	ADDQ $512, DI
	DECQ R14
	JNZ prefetch3

fold3:
	FOLD16(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, DX)
	FOLD16(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, R10)
	FOLD16(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, R11)
	TESTQ CX, CX
	JNZ slice3
	VZEROUPPER
	RET

// PAIR1 is PAIR for one row: g0 and g1 its registers.
#define PAIR1(aoff, boff, g0, g1) \
	VBROADCASTSD aoff(SI)(AX*1), Z26; \
	VMULPS boff(DI), Z26, Z29; \
	VADDPS Z29, g0, g0; \
	VMULPS (boff+64)(DI), Z26, Z26; \
	VADDPS Z26, g1, g1

// func kernel1x16(a *float32, pb *float32, c *float32, k, slice int)
TEXT ·kernel1x16(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), SI
	MOVQ pb+8(FP), DI
	MOVQ c+16(FP), DX
	MOVQ k+24(FP), CX
	MOVQ slice+32(FP), BX
	XORQ AX, AX

slice1:
	MOVQ BX, R14
	CMPQ CX, R14
	CMOVQLT CX, R14
	SUBQ R14, CX
	SHRQ $3, R14
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

eight1:
	PAIR1(0, 0, Z0, Z4)
	PAIR1(8, 128, Z1, Z5)
	PAIR1(16, 256, Z2, Z6)
	PAIR1(24, 384, Z3, Z7)
	ADDQ $32, AX
	ADDQ $512, DI
	DECQ R14
	JNZ eight1

	FOLD16(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, DX)
	TESTQ CX, CX
	JNZ slice1
	VZEROUPPER
	RET

// func pack16(dst *float32, b *float32, ldb int, k int)
//
// Each eight values of the sixteen rows, as four pairs of positions (64-bit values), rows in order:
// rows 0-3 into the low halves of Z0, Z1, Z4, Z5, rows 4-7 into their high halves, rows 8-15 so into
// Z2, Z3, Z6, Z7 — group 0's rows in Z0-Z3, group 1's in Z4-Z7. Adjacent rows' pairs interleaved
// (VPUNPCKLQDQ: pairs 0 and 2, VPUNPCKHQDQ: 1 and 3, in each 128-bit block), a pair's blocks gathered
// (VSHUFI64X2) and stored: at 128·q bytes pair q of group 0, at 128·q+64 of group 1.
TEXT ·pack16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), BX
	SHLQ $2, BX
	MOVQ k+24(FP), CX
	SHRQ $3, CX                 // eights
	XORQ AX, AX                 // AX: byte offset into the rows

pack16loop:
	MOVQ SI, R9
	VMOVUPS (R9)(AX*1), Y0
	ADDQ BX, R9
	VMOVUPS (R9)(AX*1), Y1
	ADDQ BX, R9
	VMOVUPS (R9)(AX*1), Y4
	ADDQ BX, R9
	VMOVUPS (R9)(AX*1), Y5
	ADDQ BX, R9
	VINSERTF64X4 $1, (R9)(AX*1), Z0, Z0
	ADDQ BX, R9
	VINSERTF64X4 $1, (R9)(AX*1), Z1, Z1
	ADDQ BX, R9
	VINSERTF64X4 $1, (R9)(AX*1), Z4, Z4
	ADDQ BX, R9
	VINSERTF64X4 $1, (R9)(AX*1), Z5, Z5
	ADDQ BX, R9
	VMOVUPS (R9)(AX*1), Y2
	ADDQ BX, R9
	VMOVUPS (R9)(AX*1), Y3
	ADDQ BX, R9
	VMOVUPS (R9)(AX*1), Y6
	ADDQ BX, R9
	VMOVUPS (R9)(AX*1), Y7
	ADDQ BX, R9
	VINSERTF64X4 $1, (R9)(AX*1), Z2, Z2
	ADDQ BX, R9
	VINSERTF64X4 $1, (R9)(AX*1), Z3, Z3
	ADDQ BX, R9
	VINSERTF64X4 $1, (R9)(AX*1), Z6, Z6
	ADDQ BX, R9
	VINSERTF64X4 $1, (R9)(AX*1), Z7, Z7

	VPUNPCKLQDQ Z1, Z0, Z8
	VPUNPCKHQDQ Z1, Z0, Z9
	VPUNPCKLQDQ Z3, Z2, Z10
	VPUNPCKHQDQ Z3, Z2, Z11
	VPUNPCKLQDQ Z5, Z4, Z12
	VPUNPCKHQDQ Z5, Z4, Z13
	VPUNPCKLQDQ Z7, Z6, Z14
	VPUNPCKHQDQ Z7, Z6, Z15
	VSHUFI64X2 $0x88, Z10, Z8, Z16
	VMOVUPS Z16, (DI)
	VSHUFI64X2 $0x88, Z14, Z12, Z16
	VMOVUPS Z16, 64(DI)
	VSHUFI64X2 $0x88, Z11, Z9, Z16
	VMOVUPS Z16, 128(DI)
	VSHUFI64X2 $0x88, Z15, Z13, Z16
	VMOVUPS Z16, 192(DI)
	VSHUFI64X2 $0xDD, Z10, Z8, Z16
	VMOVUPS Z16, 256(DI)
	VSHUFI64X2 $0xDD, Z14, Z12, Z16
	VMOVUPS Z16, 320(DI)
	VSHUFI64X2 $0xDD, Z11, Z9, Z16
	VMOVUPS Z16, 384(DI)
	VSHUFI64X2 $0xDD, Z15, Z13, Z16
	VMOVUPS Z16, 448(DI)

	ADDQ $32, AX
	ADDQ $512, DI
	DECQ CX
	JNZ pack16loop
	VZEROUPPER
	RET
