#include "textflag.h"

// The float32 clip search on AVX2 (ork/quant/rtn32.go): the sixteen lane sums of a group in two
// YMM registers (lanes 0-7 and 8-15), four candidates a pass over the group, whole chunks of sixteen
// values only (the caller pads a group's last chunk with zeros, which add 0). Bit for bit the sums
// of groupSearch32Go and of the AVX-512 kernel: the same products, the same lanes, the same tree.

#include "search32avx2.h"

// ERR8 adds d·d (d = y − q) of the eight values at OFF(SI) to ACC; ERRW8 adds (wd·d)·d, the
// weights at OFF(DI).
#define ERR8(OFF, ACC) \
	CODE8(OFF); \
	VSUBPS Y13, Y12, Y12; \
	VMULPS Y12, Y12, Y12; \
	VADDPS Y12, ACC, ACC

#define ERRW8(OFF, ACC) \
	CODE8(OFF); \
	VSUBPS Y13, Y12, Y12; \
	VMULPS OFF(DI), Y12, Y13; \
	VMULPS Y12, Y13, Y13; \
	VADDPS Y13, ACC, ACC

// func ErrSums16x2(x, wd *float32, chunks int, inv *[8]float32, lanes int, consts *[32]float32, errs *[8]float32) (den float32)
TEXT ·ErrSums16x2(SB), NOSPLIT, $0-60
	MOVQ inv+24(FP), R13
	MOVQ consts+40(FP), R8
	MOVQ errs+48(FP), R11
	MOVQ lanes+32(FP), R10
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	XORQ R9, R9 // the pass's first candidate

pass:
	MOVQ x+0(FP), SI
	MOVQ wd+8(FP), DI
	MOVQ chunks+16(FP), CX
	MOVQ R10, DX
	SUBQ R9, DX // candidates left
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TESTQ DI, DI
	JNZ weighted

plain:
	TESTQ R9, R9
	JNZ plainCands
	VMOVUPS (SI), Y12
	VMULPS Y12, Y12, Y12
	VADDPS Y12, Y8, Y8
	VMOVUPS 32(SI), Y12
	VMULPS Y12, Y12, Y12
	VADDPS Y12, Y9, Y9
plainCands:
	VBROADCASTSS (R13)(R9*4), Y10
	ERR8(0, Y0)
	ERR8(32, Y1)
	CMPQ DX, $1
	JLE plainNext
	VBROADCASTSS 4(R13)(R9*4), Y10
	ERR8(0, Y2)
	ERR8(32, Y3)
	CMPQ DX, $2
	JLE plainNext
	VBROADCASTSS 8(R13)(R9*4), Y10
	ERR8(0, Y4)
	ERR8(32, Y5)
	CMPQ DX, $3
	JLE plainNext
	VBROADCASTSS 12(R13)(R9*4), Y10
	ERR8(0, Y6)
	ERR8(32, Y7)
plainNext:
	ADDQ $64, SI
	DECQ CX
	JNZ plain
	JMP sums

weighted:
	TESTQ R9, R9
	JNZ weightedCands
	VMOVUPS (SI), Y12
	VMULPS (DI), Y12, Y13
	VMULPS Y12, Y13, Y13
	VADDPS Y13, Y8, Y8
	VMOVUPS 32(SI), Y12
	VMULPS 32(DI), Y12, Y13
	VMULPS Y12, Y13, Y13
	VADDPS Y13, Y9, Y9
weightedCands:
	VBROADCASTSS (R13)(R9*4), Y10
	ERRW8(0, Y0)
	ERRW8(32, Y1)
	CMPQ DX, $1
	JLE weightedNext
	VBROADCASTSS 4(R13)(R9*4), Y10
	ERRW8(0, Y2)
	ERRW8(32, Y3)
	CMPQ DX, $2
	JLE weightedNext
	VBROADCASTSS 8(R13)(R9*4), Y10
	ERRW8(0, Y4)
	ERRW8(32, Y5)
	CMPQ DX, $3
	JLE weightedNext
	VBROADCASTSS 12(R13)(R9*4), Y10
	ERRW8(0, Y6)
	ERRW8(32, Y7)
weightedNext:
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ weighted

sums:
	// The pass's candidates' sums (those past lanes are 0, and never read).
	LEAQ (R11)(R9*4), AX
	REDUCE2(Y0, Y1, X0, 0(AX))
	REDUCE2(Y2, Y3, X2, 4(AX))
	CMPQ DX, $2
	JLE passDone
	REDUCE2(Y4, Y5, X4, 8(AX))
	CMPQ DX, $3
	JLE passDone
	REDUCE2(Y6, Y7, X6, 12(AX))
passDone:
	ADDQ $4, R9
	CMPQ R9, R10
	JLT pass

	REDUCE2(Y8, Y9, X8, den+56(FP))
	VZEROUPPER
	RET

// func Codes16x2(x *float32, chunks int, inv float32, consts *[32]float32, codes *int8)
TEXT ·Codes16x2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ chunks+8(FP), CX
	VBROADCASTSS inv+16(FP), Y10
	MOVQ consts+24(FP), R8
	MOVQ codes+32(FP), DI
codes:
	CODE8(0)
	VCVTTPS2DQ Y13, Y0
	CODE8(32)
	VCVTTPS2DQ Y13, Y1
	VPACKSSDW Y1, Y0, Y0 // per 128-bit half: four of lanes 0-7, then four of 8-15
	VPERMQ $0xD8, Y0, Y0 // sixteen int16 in order
	VPACKSSWB Y0, Y0, Y0 // per half: its eight codes, twice
	VPERMQ $0x08, Y0, Y0 // the sixteen codes in the low half
	VMOVDQU X0, (DI)
	ADDQ $64, SI
	ADDQ $16, DI
	DECQ CX
	JNZ codes
	VZEROUPPER
	RET

// func AbsMaxBits8(x *float32, n int) uint32 — the largest bit pattern of |x_k| over n values, n a
// positive multiple of 8, by unsigned integer maxima (so a NaN, whose patterns lie above +Inf's, wins).
TEXT ·AbsMaxBits8(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VPBROADCASTD absBits32<>(SB), Y3
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	CMPQ CX, $16
	JLT absTail8

absLoop16:
	VPAND 0(SI), Y3, Y2
	VPMAXUD Y2, Y0, Y0
	VPAND 32(SI), Y3, Y2
	VPMAXUD Y2, Y1, Y1
	ADDQ $64, SI
	SUBQ $16, CX
	CMPQ CX, $16
	JGE absLoop16

absTail8:
	TESTQ CX, CX
	JZ absReduce
	VPAND 0(SI), Y3, Y2
	VPMAXUD Y2, Y0, Y0

absReduce:
	MAXREDUCE
	VMOVD X0, AX
	MOVL AX, ret+16(FP)
	VZEROUPPER
	RET

// func PrepScales8(amax float32, grid *[8]float64, qmax float64, sj, inv *[8]float32)
TEXT ·PrepScales8(SB), NOSPLIT, $0-40
	VMOVSS amax+0(FP), X0
	MOVQ grid+8(FP), SI
	MOVQ sj+24(FP), DI
	MOVQ inv+32(FP), DX
	VCVTSS2SD X0, X0, X0
	VBROADCASTSD X0, Y0
	VBROADCASTSD qmax+16(FP), Y1
	SCALES8(SI)
	VMOVUPS Y2, 0(DI)
	INV8
	VMOVUPS Y5, 0(DX)
	VZEROUPPER
	RET
