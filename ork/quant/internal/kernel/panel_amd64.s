#include "textflag.h"

// func PanelDots16x4(w *uint8, a *int8, kp, ng, g8 int, corr *int32, scales, ascale, out *float32)
//
// Lanes are the panel's sixteen rows. Each step of a group broadcasts four codes of a token
// (VPDPBUSD.BCST: 32 bits of the token's row) against the 64 bytes that hold the same four columns
// of the sixteen rows; two such steps go side by side into two accumulators per token, so eight
// independent chains of VPDPBUSD run for the four tokens. After a group: the two accumulators
// added, the token's correction subtracted (exact int32 so far), converted to float32 (round to
// nearest, as Go's conversion), multiplied by the group's sixteen scales and added to the token's
// float32 sums — one VMULPS and one VADDPS, in group order, as the Go loop.
//
// Registers: DI panel, SI token 0's codes (token t at SI + t·kp: R8 = kp, R9 = 2kp, R10 = 3kp),
// DX corr (token t at DX + t·ng·4: R11 = 4ng, R12 = 12ng), BX scales, CX groups left, R13 steps
// left in the group. Z16-Z19 float sums, Z20-Z23 and Z24-Z27 int32 sums, Z0 and Z1 panel bytes,
// Z2 the group's scales.
TEXT ·PanelDots16x4(SB), NOSPLIT, $0-72
	MOVQ w+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ kp+16(FP), R8
	MOVQ ng+24(FP), CX
	MOVQ g8+32(FP), R14
	MOVQ corr+40(FP), DX
	MOVQ scales+48(FP), BX
	LEAQ (R8)(R8*1), R9
	LEAQ (R9)(R8*1), R10
	MOVQ CX, R11
	SHLQ $2, R11
	LEAQ (R11)(R11*2), R12

	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19

group:
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	MOVQ R14, R13

step:
	VMOVDQU32 (DI), Z0
	VMOVDQU32 64(DI), Z1
	VPDPBUSD.BCST (SI), Z0, Z20
	VPDPBUSD.BCST 4(SI), Z1, Z24
	VPDPBUSD.BCST (SI)(R8*1), Z0, Z21
	VPDPBUSD.BCST 4(SI)(R8*1), Z1, Z25
	VPDPBUSD.BCST (SI)(R9*1), Z0, Z22
	VPDPBUSD.BCST 4(SI)(R9*1), Z1, Z26
	VPDPBUSD.BCST (SI)(R10*1), Z0, Z23
	VPDPBUSD.BCST 4(SI)(R10*1), Z1, Z27
	ADDQ $128, DI
	ADDQ $8, SI
	DECQ R13
	JNZ  step

	VMOVUPS (BX), Z2
	VPADDD Z24, Z20, Z20
	VPADDD Z25, Z21, Z21
	VPADDD Z26, Z22, Z22
	VPADDD Z27, Z23, Z23
	VPSUBD.BCST (DX), Z20, Z20
	VPSUBD.BCST (DX)(R11*1), Z21, Z21
	VPSUBD.BCST (DX)(R11*2), Z22, Z22
	VPSUBD.BCST (DX)(R12*1), Z23, Z23
	VCVTDQ2PS Z20, Z20
	VCVTDQ2PS Z21, Z21
	VCVTDQ2PS Z22, Z22
	VCVTDQ2PS Z23, Z23
	VMULPS Z2, Z20, Z20
	VMULPS Z2, Z21, Z21
	VMULPS Z2, Z22, Z22
	VMULPS Z2, Z23, Z23
	VADDPS Z20, Z16, Z16
	VADDPS Z21, Z17, Z17
	VADDPS Z22, Z18, Z18
	VADDPS Z23, Z19, Z19
	ADDQ $64, BX
	ADDQ $4, DX
	DECQ CX
	JNZ  group

	MOVQ ascale+56(FP), AX
	MOVQ out+64(FP), DI
	VMULPS.BCST (AX), Z16, Z16
	VMULPS.BCST 4(AX), Z17, Z17
	VMULPS.BCST 8(AX), Z18, Z18
	VMULPS.BCST 12(AX), Z19, Z19
	VMOVUPS Z16, (DI)
	VMOVUPS Z17, 64(DI)
	VMOVUPS Z18, 128(DI)
	VMOVUPS Z19, 192(DI)
	VZEROUPPER
	RET

// func PanelDots16x4AVX2(w *int8, a *int16, kp, ng, g8 int, scales, ascale, out *float32)
//
// Lanes are rows again, eight to a register. A step takes two columns: the sixteen rows' code
// pairs sign-extended to int16 (VPMOVSXBW, rows 0-7 and 8-15), each token's pair of int16 codes
// broadcast to every lane (VPBROADCASTD), and VPMADDWD's pairwise products summed to int32 into the
// token's two accumulators (|w·a| <= 16384: a pair's sum fits, and the group's sum is exact). After a
// group: each accumulator converted to float32 (round to nearest, as Go's conversion), multiplied
// by the group's scales and added to the token's float32 sums, kept in out (one VMULPS and one
// VADDPS, in group order, as the Go loop).
//
// Registers: DI panel, SI token 0's codes (token t at SI + t·2kp bytes: R8 = 2kp, R9 = 4kp, R10 =
// 6kp), BX scales, DX out, CX groups left, R13 eights of columns left in the group. Y8-Y15 int32
// sums (token t rows 0-7 in Y8+2t, rows 8-15 in Y9+2t), Y0 and Y1 panel words, Y2-Y5 a token's
// pair, Y6 and Y7 products.
#define PAIR(off, aoff) \
	VPMOVSXBW off(DI), Y0 \
	VPMOVSXBW off+16(DI), Y1 \
	VPBROADCASTD aoff(SI), Y2 \
	VPMADDWD Y2, Y0, Y6 \
	VPMADDWD Y2, Y1, Y7 \
	VPADDD Y6, Y8, Y8 \
	VPADDD Y7, Y9, Y9 \
	VPBROADCASTD aoff(SI)(R8*1), Y3 \
	VPMADDWD Y3, Y0, Y6 \
	VPMADDWD Y3, Y1, Y7 \
	VPADDD Y6, Y10, Y10 \
	VPADDD Y7, Y11, Y11 \
	VPBROADCASTD aoff(SI)(R9*1), Y4 \
	VPMADDWD Y4, Y0, Y6 \
	VPMADDWD Y4, Y1, Y7 \
	VPADDD Y6, Y12, Y12 \
	VPADDD Y7, Y13, Y13 \
	VPBROADCASTD aoff(SI)(R10*1), Y5 \
	VPMADDWD Y5, Y0, Y6 \
	VPMADDWD Y5, Y1, Y7 \
	VPADDD Y6, Y14, Y14 \
	VPADDD Y7, Y15, Y15

// FSUM adds float32(acc)·scale to the float32 sums at off(DX).
#define FSUM(acc, scale, off) \
	VCVTDQ2PS acc, Y6 \
	VMULPS scale, Y6, Y6 \
	VADDPS off(DX), Y6, Y6 \
	VMOVUPS Y6, off(DX)

// FSCALE multiplies the eight float32 sums at off(DX) by the broadcast scale at soff(AX).
#define FSCALE(soff, off) \
	VBROADCASTSS soff(AX), Y2 \
	VMULPS off(DX), Y2, Y6 \
	VMOVUPS Y6, off(DX)

TEXT ·PanelDots16x4AVX2(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ kp+16(FP), R8
	MOVQ ng+24(FP), CX
	MOVQ g8+32(FP), R14
	MOVQ scales+40(FP), BX
	MOVQ out+56(FP), DX
	SHLQ $1, R8
	LEAQ (R8)(R8*1), R9
	LEAQ (R9)(R8*1), R10

	VXORPS Y6, Y6, Y6
	VMOVUPS Y6, (DX)
	VMOVUPS Y6, 32(DX)
	VMOVUPS Y6, 64(DX)
	VMOVUPS Y6, 96(DX)
	VMOVUPS Y6, 128(DX)
	VMOVUPS Y6, 160(DX)
	VMOVUPS Y6, 192(DX)
	VMOVUPS Y6, 224(DX)

pgroup:
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	VPXOR Y12, Y12, Y12
	VPXOR Y13, Y13, Y13
	VPXOR Y14, Y14, Y14
	VPXOR Y15, Y15, Y15
	MOVQ R14, R13

peight:
	PAIR(0, 0)
	PAIR(32, 4)
	PAIR(64, 8)
	PAIR(96, 12)
	ADDQ $128, DI
	ADDQ $16, SI
	DECQ R13
	JNZ  peight

	VMOVUPS (BX), Y0
	VMOVUPS 32(BX), Y1
	FSUM(Y8, Y0, 0)
	FSUM(Y9, Y1, 32)
	FSUM(Y10, Y0, 64)
	FSUM(Y11, Y1, 96)
	FSUM(Y12, Y0, 128)
	FSUM(Y13, Y1, 160)
	FSUM(Y14, Y0, 192)
	FSUM(Y15, Y1, 224)
	ADDQ $64, BX
	DECQ CX
	JNZ  pgroup

	MOVQ ascale+48(FP), AX
	FSCALE(0, 0)
	FSCALE(0, 32)
	FSCALE(4, 64)
	FSCALE(4, 96)
	FSCALE(8, 128)
	FSCALE(8, 160)
	FSCALE(12, 192)
	FSCALE(12, 224)
	VZEROUPPER
	RET

// func Widen16(dst *int16, src *int8, n16 int)
TEXT ·Widen16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n16+16(FP), CX

widen:
	VPMOVSXBW (SI), Y0
	VMOVDQU Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  widen
	VZEROUPPER
	RET
