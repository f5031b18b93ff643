#include "textflag.h"

// EXP16 replaces the sixteen values in Z0 by Expf(x - mx): Expf's operations in its order, each
// rounded (no fused multiply-add), with mx in Z31 and the constants broadcast in Z19-Z30 (Z18: the
// integer 127); lanes below expMin are zeroed at the end (K2).
#define EXP16 \
	VSUBPS Z31, Z0, Z0; \
	VCMPPS $1, Z19, Z0, K2; \
	VMULPS Z20, Z0, Z1; \
	VADDPS Z21, Z1, Z1; \
	VRNDSCALEPS $9, Z1, Z1; \
	VMULPS Z22, Z1, Z2; \
	VSUBPS Z2, Z0, Z2; \
	VMULPS Z23, Z1, Z3; \
	VSUBPS Z3, Z2, Z2; \
	VMULPS Z2, Z24, Z4; \
	VADDPS Z25, Z4, Z4; \
	VMULPS Z2, Z4, Z4; \
	VADDPS Z26, Z4, Z4; \
	VMULPS Z2, Z4, Z4; \
	VADDPS Z27, Z4, Z4; \
	VMULPS Z2, Z4, Z4; \
	VADDPS Z28, Z4, Z4; \
	VMULPS Z2, Z4, Z4; \
	VADDPS Z29, Z4, Z4; \
	VMULPS Z2, Z4, Z4; \
	VMULPS Z2, Z4, Z4; \
	VADDPS Z2, Z4, Z4; \
	VADDPS Z30, Z4, Z4; \
	VCVTTPS2DQ Z1, Z5; \
	VPADDD Z18, Z5, Z5; \
	VPSLLD $23, Z5, Z5; \
	VMULPS Z5, Z4, Z0; \
	VPXORD Z0, Z0, K2, Z0

// func expShift(x *float32, n int, mx float32, c *[12]float32)
TEXT ·expShift(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS mx+16(FP), Z31
	MOVQ c+24(FP), DX
	VBROADCASTSS 0(DX), Z19
	VBROADCASTSS 4(DX), Z20
	VBROADCASTSS 8(DX), Z21
	VBROADCASTSS 12(DX), Z22
	VBROADCASTSS 16(DX), Z23
	VBROADCASTSS 20(DX), Z24
	VBROADCASTSS 24(DX), Z25
	VBROADCASTSS 28(DX), Z26
	VBROADCASTSS 32(DX), Z27
	VBROADCASTSS 36(DX), Z28
	VBROADCASTSS 40(DX), Z29
	VBROADCASTSS 44(DX), Z30
	MOVL $127, AX
	VPBROADCASTD AX, Z18

loop:
	CMPQ CX, $16
	JLT tail
	VMOVUPS (SI), Z0
	EXP16
	VMOVUPS Z0, (SI)
	ADDQ $64, SI
	SUBQ $16, CX
	JMP loop

tail:
	TESTQ CX, CX
	JZ done
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z0
	EXP16
	VMOVUPS Z0, K1, (SI)

done:
	VZEROUPPER
	RET
