#include "textflag.h"

// kernel3x4p and kernel1x4p are kernel3x16's plan in AVX2 registers: DotUnitary's eight lanes of an
// output in two registers, four lanes a register, two outputs a register. Four rows of B are packed
// (pack4) as, for each four positions 4q..4q+3 of K, rows 0 and 2's values there (32 bytes: register
// "X"), then rows 1 and 3's ("Y"). A row of A's four values at 4q are broadcast to both halves of a
// register (VBROADCASTF128, a load with no shuffle) and multiplied with X and Y (VMULPS, then
// VADDPS: no fused multiply-add; A's value first, sum + product) into the row's X and Y registers
// of q's parity: an even q's products are lanes 0-3 (positions l mod 8 = 0-3), an odd q's lanes 4-7.
// At the end of a slice the registers fold as DotUnitary folds its lanes: l + (l+4) is the even
// register + the odd one; s0+s1 and s2+s3 are adjacent lanes, gathered from X and Y by even/odd
// shuffles, then (s0+s1)+(s2+s3) from the pairs so made, and the four sums, which land as rows 0, 1
// | 2, 3 of B (whence X's and Y's rows), moved to one 128-bit register; then the slice sums + C's
// values (the order of gonum's compiled c += alpha·sum, which decides which of two NaNs' payloads a
// sum keeps: TestNaNPayloads). Twelve sums, two B registers, a broadcast and a product: all sixteen
// YMM registers.

// QUAD multiplies the four values at aoff of the three rows with the packed X and Y at boff and adds
// the products to the rows' registers: x0, y0 (row 0), x1, y1, x2, y2.
#define QUAD(aoff, boff, x0, y0, x1, y1, x2, y2) \
	VMOVUPS boff(DI), Y12; \
	VMOVUPS (boff+32)(DI), Y13; \
	VBROADCASTF128 aoff(SI)(AX*1), Y14; \
	VMULPS Y12, Y14, Y15; \
	VADDPS Y15, x0, x0; \
	VMULPS Y13, Y14, Y14; \
	VADDPS Y14, y0, y0; \
	VBROADCASTF128 aoff(R8)(AX*1), Y14; \
	VMULPS Y12, Y14, Y15; \
	VADDPS Y15, x1, x1; \
	VMULPS Y13, Y14, Y14; \
	VADDPS Y14, y1, y1; \
	VBROADCASTF128 aoff(R9)(AX*1), Y14; \
	VMULPS Y12, Y14, Y15; \
	VADDPS Y15, x2, x2; \
	VMULPS Y13, Y14, Y14; \
	VADDPS Y14, y2, y2

// FOLD4P adds the slice sums of a row to the four values of C at ptr: xe, ye its even registers, xo,
// yo its odd ones (xe and ye are overwritten; Y12-Y14 too).
#define FOLD4P(xe, ye, xo, yo, ptr) \
	VADDPS xo, xe, xe; \
	VADDPS yo, ye, ye; \
	VSHUFPS $0x88, ye, xe, Y12; \
	VSHUFPS $0xDD, ye, xe, Y13; \
	VADDPS Y13, Y12, Y12; \
	VSHUFPS $0x88, Y12, Y12, Y13; \
	VSHUFPS $0xDD, Y12, Y12, Y14; \
	VADDPS Y14, Y13, Y13; \
	VPERMPD $0x08, Y13, Y13; \
	VMOVUPS (ptr), X14; \
	VADDPS X14, X13, X14; \
	VMOVUPS X14, (ptr)

// func kernel3x4p(a *float32, lda int, pb *float32, c *float32, ldc int, k, slice int, next *float32)
TEXT ·kernel3x4p(SB), NOSPLIT, $0-64
	MOVQ a+0(FP), SI
	MOVQ lda+8(FP), BX
	SHLQ $2, BX
	LEAQ (SI)(BX*1), R8         // R8, R9: rows 1 and 2 of A
	LEAQ (R8)(BX*1), R9
	MOVQ pb+16(FP), DI          // DI: the packed rows, 128 bytes an eight of K
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
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

	TESTQ R12, R12
	JNZ prefetch3

eight3:
	QUAD(0, 0, Y0, Y1, Y4, Y5, Y8, Y9)
	QUAD(16, 64, Y2, Y3, Y6, Y7, Y10, Y11)
	ADDQ $32, AX
	ADDQ $128, DI
	DECQ R14
	JNZ eight3
	JMP fold3

prefetch3:
	PREFETCHT0 (R12)
	PREFETCHT0 (R12)(R13*1)
	PREFETCHT0 (R12)(R13*2)
	QUAD(0, 0, Y0, Y1, Y4, Y5, Y8, Y9)
	QUAD(16, 64, Y2, Y3, Y6, Y7, Y10, Y11)
	ADDQ $32, R12
	ADDQ $32, AX
	ADDQ $128, DI
	DECQ R14
	JNZ prefetch3

fold3:
	FOLD4P(Y0, Y1, Y2, Y3, DX)
	FOLD4P(Y4, Y5, Y6, Y7, R10)
	FOLD4P(Y8, Y9, Y10, Y11, R11)
	TESTQ CX, CX
	JNZ slice3
	VZEROUPPER
	RET

// QUAD1 is QUAD for one row: x and y its registers.
#define QUAD1(aoff, boff, x, y) \
	VBROADCASTF128 aoff(SI)(AX*1), Y14; \
	VMULPS boff(DI), Y14, Y15; \
	VADDPS Y15, x, x; \
	VMULPS (boff+32)(DI), Y14, Y14; \
	VADDPS Y14, y, y

// func kernel1x4p(a *float32, pb *float32, c *float32, k, slice int)
TEXT ·kernel1x4p(SB), NOSPLIT, $0-40
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
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

eight1:
	QUAD1(0, 0, Y0, Y1)
	QUAD1(16, 64, Y2, Y3)
	ADDQ $32, AX
	ADDQ $128, DI
	DECQ R14
	JNZ eight1

	FOLD4P(Y0, Y1, Y2, Y3, DX)
	TESTQ CX, CX
	JNZ slice1
	VZEROUPPER
	RET

// func pack4(dst *float32, b *float32, ldb int, k int)
//
// Each eight values of the four rows (Y0-Y3), their halves paired: the first fours of rows 0 and 2
// (VPERM2F128 $0x20), of rows 1 and 3, then the second fours (VPERM2F128 $0x31).
TEXT ·pack4(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), BX
	SHLQ $2, BX
	LEAQ (SI)(BX*1), R8         // R8-R10: rows 1-3
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	MOVQ k+24(FP), CX
	SHRQ $3, CX                 // eights
	XORQ AX, AX                 // AX: byte offset into the rows

pack4loop:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS (R8)(AX*1), Y1
	VMOVUPS (R9)(AX*1), Y2
	VMOVUPS (R10)(AX*1), Y3
	VPERM2F128 $0x20, Y2, Y0, Y4
	VPERM2F128 $0x20, Y3, Y1, Y5
	VPERM2F128 $0x31, Y2, Y0, Y6
	VPERM2F128 $0x31, Y3, Y1, Y7
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	VMOVUPS Y6, 64(DI)
	VMOVUPS Y7, 96(DI)
	ADDQ $32, AX
	ADDQ $128, DI
	DECQ CX
	JNZ pack4loop
	VZEROUPPER
	RET
