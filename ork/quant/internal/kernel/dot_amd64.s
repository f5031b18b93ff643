#include "textflag.h"

// func GroupDotsInt8(a, w *int8, groups, g16 int, dots *int32) — for each of the groups groups of
// g16·16 int8 values at a and w, dots[i] = Σ a_k·w_k as an int32: sixteen values at a time
// sign-extended to int16 (VPMOVSXBW), multiplied and summed in pairs to int32 (VPMADDWD), the
// eight int32 lanes then added together. Integer arithmetic: exact in any order (|a_k·w_k| <=
// 16384, so a group below 131072 values cannot overflow); groups and g16 positive.
TEXT ·GroupDotsInt8(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ groups+16(FP), CX
	MOVQ g16+24(FP), R8
	MOVQ dots+32(FP), DX

group:
	VPXOR Y0, Y0, Y0
	MOVQ R8, R9

sixteen:
	VPMOVSXBW (SI), Y1
	VPMOVSXBW (DI), Y2
	VPMADDWD Y2, Y1, Y3
	VPADDD Y3, Y0, Y0
	ADDQ $16, SI
	ADDQ $16, DI
	DECQ R9
	JNZ sixteen

	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0x4E, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xB1, X0, X1
	VPADDD X1, X0, X0
	VMOVD X0, AX
	MOVL AX, (DX)
	ADDQ $4, DX
	DECQ CX
	JNZ group

	VZEROUPPER
	RET

// G32 adds the products of the 32 values at off(SI) and off(DI) into acc as eight int32 partial sums.
#define G32(off, acc) \
	VPMOVSXBW off(SI), Y8; \
	VPMOVSXBW off(DI), Y9; \
	VPMADDWD Y9, Y8, acc; \
	VPMOVSXBW off+16(SI), Y10; \
	VPMOVSXBW off+16(DI), Y11; \
	VPMADDWD Y11, Y10, Y10; \
	VPADDD Y10, acc, acc

// func GroupDots32x8(a, w *int8, dots *int32) — GroupDotsInt8 for eight groups of 32 values: each
// group's eight partial sums in a register of its own, then the eight registers reduced together
// (VPHADDD twice, the 128-bit halves added), dots[0..7] stored at once.
TEXT ·GroupDots32x8(SB), NOSPLIT, $0-24
	MOVQ a+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ dots+16(FP), DX
	G32(0, Y0)
	G32(32, Y1)
	G32(64, Y2)
	G32(96, Y3)
	G32(128, Y4)
	G32(160, Y5)
	G32(192, Y6)
	G32(224, Y7)
	VPHADDD Y1, Y0, Y0
	VPHADDD Y3, Y2, Y2
	VPHADDD Y5, Y4, Y4
	VPHADDD Y7, Y6, Y6
	VPHADDD Y2, Y0, Y0
	VPHADDD Y6, Y4, Y4
	VPERM2I128 $0x20, Y4, Y0, Y1
	VPERM2I128 $0x31, Y4, Y0, Y2
	VPADDD Y2, Y1, Y1
	VMOVDQU Y1, (DX)
	VZEROUPPER
	RET
