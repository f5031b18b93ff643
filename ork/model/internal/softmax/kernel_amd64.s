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

// func expShift16(x *float32, n int, mx float32, c *[12]float32)
TEXT ·expShift16(SB), NOSPLIT, $0-32
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

// EXP8 is EXP16 on the eight values in Y0, in YMM registers: mx in Y15, expMin, log2e, 0.5, ln2Hi,
// ln2Lo, p0 and 1 in Y14-Y8, p1-p5 and the integer 127 read from the constants at DX (eight lanes
// each); the lanes below expMin are cleared by the compare's mask in Y6.
#define EXP8 \
	VSUBPS Y15, Y0, Y0; \
	VCMPPS $1, Y14, Y0, Y6; \
	VMULPS Y13, Y0, Y1; \
	VADDPS Y12, Y1, Y1; \
	VROUNDPS $9, Y1, Y1; \
	VMULPS Y11, Y1, Y2; \
	VSUBPS Y2, Y0, Y2; \
	VMULPS Y10, Y1, Y3; \
	VSUBPS Y3, Y2, Y2; \
	VMULPS Y2, Y9, Y4; \
	VADDPS 192(DX), Y4, Y4; \
	VMULPS Y2, Y4, Y4; \
	VADDPS 224(DX), Y4, Y4; \
	VMULPS Y2, Y4, Y4; \
	VADDPS 256(DX), Y4, Y4; \
	VMULPS Y2, Y4, Y4; \
	VADDPS 288(DX), Y4, Y4; \
	VMULPS Y2, Y4, Y4; \
	VADDPS 320(DX), Y4, Y4; \
	VMULPS Y2, Y4, Y4; \
	VMULPS Y2, Y4, Y4; \
	VADDPS Y2, Y4, Y4; \
	VADDPS Y8, Y4, Y4; \
	VCVTTPS2DQ Y1, Y5; \
	VPADDD 384(DX), Y5, Y5; \
	VPSLLD $23, Y5, Y5; \
	VMULPS Y5, Y4, Y0; \
	VANDNPS Y0, Y6, Y0

// tailmask8 is eight lanes of ones then eight of zeros: the eight int32s at tailmask8+4·(8-n) select
// the first n lanes.
DATA tailmask8<>+0(SB)/8, $0xffffffffffffffff
DATA tailmask8<>+8(SB)/8, $0xffffffffffffffff
DATA tailmask8<>+16(SB)/8, $0xffffffffffffffff
DATA tailmask8<>+24(SB)/8, $0xffffffffffffffff
DATA tailmask8<>+32(SB)/8, $0
DATA tailmask8<>+40(SB)/8, $0
DATA tailmask8<>+48(SB)/8, $0
DATA tailmask8<>+56(SB)/8, $0
GLOBL tailmask8<>(SB), RODATA|NOPTR, $64

// func expShift8(x *float32, n int, mx float32, c *[13][8]float32)
TEXT ·expShift8(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS mx+16(FP), Y15
	MOVQ c+24(FP), DX
	VMOVUPS 0(DX), Y14
	VMOVUPS 32(DX), Y13
	VMOVUPS 64(DX), Y12
	VMOVUPS 96(DX), Y11
	VMOVUPS 128(DX), Y10
	VMOVUPS 160(DX), Y9
	VMOVUPS 352(DX), Y8

loop8:
	CMPQ CX, $8
	JLT tail8
	VMOVUPS (SI), Y0
	EXP8
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	SUBQ $8, CX
	JMP loop8

tail8:
	TESTQ CX, CX
	JZ done8
	LEAQ tailmask8<>+32(SB), AX
	SHLQ $2, CX
	SUBQ CX, AX
	VMOVDQU (AX), Y7
	VMASKMOVPS (SI), Y7, Y0
	EXP8
	VMASKMOVPS Y0, Y7, (SI)

done8:
	VZEROUPPER
	RET

// func max8(x *float32, n int) (mx float32, ok bool)
//
// The maximum of the n values at x (n >= 8): blocks of eight in four registers, the last block the
// eight values ending at x+n (overlapping the block before: a maximum may count a value twice). Any
// NaN among them clears ok and mx is then meaningless.
TEXT ·max8(SB), NOSPLIT, $0-21
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	LEAQ -32(SI)(CX*4), DI
	VMOVUPS (DI), Y0
	VMOVAPS Y0, Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y0, Y3
	VCMPPS $3, Y0, Y0, Y4
	VMOVAPS Y4, Y5
	SHRQ $3, CX

loop4:
	CMPQ CX, $4
	JLT loop1
	VMOVUPS (SI), Y6
	VMOVUPS 32(SI), Y7
	VMOVUPS 64(SI), Y8
	VMOVUPS 96(SI), Y9
	VMAXPS Y6, Y0, Y0
	VMAXPS Y7, Y1, Y1
	VMAXPS Y8, Y2, Y2
	VMAXPS Y9, Y3, Y3
	VCMPPS $3, Y7, Y6, Y6
	VCMPPS $3, Y9, Y8, Y8
	VORPS Y6, Y4, Y4
	VORPS Y8, Y5, Y5
	ADDQ $128, SI
	SUBQ $4, CX
	JMP loop4

loop1:
	TESTQ CX, CX
	JZ reduce
	VMOVUPS (SI), Y6
	VMAXPS Y6, Y0, Y0
	VCMPPS $3, Y6, Y6, Y6
	VORPS Y6, Y4, Y4
	ADDQ $32, SI
	DECQ CX
	JMP loop1

reduce:
	VORPS Y5, Y4, Y4
	VMOVMSKPS Y4, AX
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VMAXPS X1, X0, X0
	VMOVSHDUP X0, X1
	VMAXSS X1, X0, X0
	VMOVSS X0, mx+16(FP)
	TESTL AX, AX
	SETEQ ok+20(FP)
	VZEROUPPER
	RET
