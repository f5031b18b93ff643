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
