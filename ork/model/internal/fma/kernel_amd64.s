#include "textflag.h"

// func lanes8(w, x *float32, n int, acc *[8]float32)
//
// acc = w·x + acc lane by lane, eight values a step, one rounding each (VFMADD231PS), in order (each
// lane's sum is one chain).
TEXT ·lanes8(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ acc+24(FP), DX
	VMOVUPS (DX), Y0
	SHRQ $3, CX

loop:
	VMOVUPS (SI), Y1
	VFMADD231PS (DI), Y1, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop

	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET

// func lanes32(w, x *float32, n int, acc *[4][8]float32)
//
// lanes8 for four accumulators, the values of each block of 32 eight to an accumulator in order.
TEXT ·lanes32(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ acc+24(FP), DX
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS 64(DX), Y2
	VMOVUPS 96(DX), Y3
	SHRQ $5, CX

loop32:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	DECQ CX
	JNZ loop32

	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VZEROUPPER
	RET

// func q8Lanes(wq, xq *int8, wd, xd *float32, n int, acc *[8]float32)
//
// Per block: the 32 codes of w and x widened to int16 (VPMOVSXBW), multiplied and summed in pairs
// (VPMADDWD: pair k = codes 2k, 2k+1, exact), adjacent pairs summed (VPHADDD, then VPERMQ to put
// lane j = codes 4j..4j+3 in order), converted to float32 (exact), and acc = d·s + acc with d =
// wd·xd rounded to float32 (VMULSS) broadcast (VFMADD231PS).
TEXT ·q8Lanes(SB), NOSPLIT, $0-48
	MOVQ wq+0(FP), SI
	MOVQ xq+8(FP), DI
	MOVQ wd+16(FP), R8
	MOVQ xd+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ acc+40(FP), DX
	VMOVUPS (DX), Y0

loopq8:
	VPMOVSXBW (SI), Y1
	VPMOVSXBW (DI), Y2
	VPMADDWD Y2, Y1, Y1
	VPMOVSXBW 16(SI), Y3
	VPMOVSXBW 16(DI), Y4
	VPMADDWD Y4, Y3, Y3
	VPHADDD Y3, Y1, Y1
	VPERMQ $0xD8, Y1, Y1
	VCVTDQ2PS Y1, Y1
	VMOVSS (R8), X5
	VMULSS (R9), X5, X5
	VBROADCASTSS X5, Y5
	VFMADD231PS Y1, Y5, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JNZ loopq8

	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET
