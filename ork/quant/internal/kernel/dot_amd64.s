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
