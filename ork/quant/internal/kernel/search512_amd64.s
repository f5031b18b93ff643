#include "textflag.h"

// The AVX-512 kernels: the eight candidates of a clip search in the lanes of one ZMM register
// (the AVX2 kernels need two YMM registers), with the arithmetic of kernel_amd64.s's CODE and ERR
// (VRNDSCALEPD $3 truncates as VROUNDPD $3 does), so the results are bit-identical.

DATA absMask512<>+0(SB)/8, $0x7FFFFFFFFFFFFFFF
GLOBL absMask512<>(SB), RODATA|NOPTR, $8

DATA one512<>+0(SB)/8, $0x3FF0000000000000
GLOBL one512<>(SB), RODATA|NOPTR, $8

DATA sign512<>+0(SB)/8, $0x8000000000000000
GLOBL sign512<>(SB), RODATA|NOPTR, $8

DATA half512<>+0(SB)/8, $0x3FDFFFFFFFFFFFFF
GLOBL half512<>(SB), RODATA|NOPTR, $8

DATA inf512<>+0(SB)/8, $0x7FF0000000000000
GLOBL inf512<>(SB), RODATA|NOPTR, $8

// CODEZ leaves in Z13 quantCode(x, inv) for the x in Z11 and the inverses in Z4, with the sign
// mask in Z9 and 0.49999999999999994 (the float64 below 0.5) in Z10: y = x·inv, then
// trunc(y + copysign(0.49999999999999994, y)), which is round-half-away(y) for every finite y (the
// sum rounds to nearest even exactly where the tie must go away from zero), then clamped to
// [Z6, Z7].
#define CODEZ \
	VMULPD Z4, Z11, Z12; \
	VPANDQ Z9, Z12, Z14; \
	VPORQ Z10, Z14, Z14; \
	VADDPD Z14, Z12, Z13; \
	VRNDSCALEPD $3, Z13, Z13; \
	VMAXPD Z6, Z13, Z13; \
	VMINPD Z7, Z13, Z13

#define CODECONST \
	VBROADCASTSD sign512<>(SB), Z9; \
	VBROADCASTSD half512<>(SB), Z10

// func GroupSearch8(x, wd *float64, n int, grid *[8]float64, lanes int, qmax float64, lohi *[2]float64, s, errs *[8]float64) (amax, den float64, best int)
TEXT ·GroupSearch8(SB), NOSPLIT, $0-96
	MOVQ x+0(FP), SI
	MOVQ wd+8(FP), DI
	MOVQ n+16(FP), CX

	// amax = max |x_k|: eight at a time, then one at a time.
	VBROADCASTSD absMask512<>(SB), Z3
	VPXORQ Z0, Z0, Z0
	MOVQ SI, R8
	MOVQ CX, R9
amax8:
	CMPQ R9, $8
	JLT amaxReduce
	VANDPD 0(R8), Z3, Z1
	VMAXPD Z0, Z1, Z0
	ADDQ $64, R8
	SUBQ $8, R9
	JMP amax8
amaxReduce:
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPD Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPD X1, X0, X0
	VPERMILPD $1, X0, X1
	VMAXSD X1, X0, X0
amax1:
	TESTQ R9, R9
	JZ amaxDone
	VMOVSD 0(R8), X1
	VANDPD X3, X1, X1
	VMAXSD X0, X1, X0
	ADDQ $8, R8
	DECQ R9
	JMP amax1
amaxDone:
	VMOVSD X0, amax+72(FP)
	VXORPD X1, X1, X1
	VUCOMISD X1, X0
	JPS candidates // NaN: searched, as chooseScaleErr does
	JNE candidates
	// An all-zero group: no candidate (the caller returns scale 0); Σ wd·x² of zeros is 0.
	VMOVSD X1, den+80(FP)
	MOVQ $-1, best+88(FP)
	VZEROUPPER
	RET

candidates:
	// s_j = float64(float32(grid_j·amax/qmax)), inv_j = 1/s_j.
	MOVQ grid+24(FP), AX
	VBROADCASTSD X0, Z8
	VMULPD 0(AX), Z8, Z9
	VBROADCASTSD qmax+40(FP), Z10
	VDIVPD Z10, Z9, Z9
	VCVTPD2PS Z9, Y9
	VCVTPS2PD Y9, Z2
	VBROADCASTSD one512<>(SB), Z10
	VDIVPD Z2, Z10, Z4
	MOVQ lohi+48(FP), DX
	VBROADCASTSD 0(DX), Z6
	VBROADCASTSD 8(DX), Z7
	CODECONST
	VPXORQ Z0, Z0, Z0
	VXORPD X15, X15, X15
	TESTQ DI, DI
	JNZ weighted

plain:
	VBROADCASTSD (SI), Z11
	CODEZ
	VMULPD Z2, Z13, Z13
	VSUBPD Z13, Z11, Z13
	VMULPD Z13, Z13, Z13
	VADDPD Z13, Z0, Z0
	VMULSD X11, X11, X12
	VADDSD X12, X15, X15
	ADDQ $8, SI
	DECQ CX
	JNZ plain
	JMP done

weighted:
	VBROADCASTSD (SI), Z11
	VBROADCASTSD (DI), Z8
	CODEZ
	VMULPD Z2, Z13, Z13
	VSUBPD Z13, Z11, Z13
	VMULPD Z13, Z8, Z14
	VMULPD Z13, Z14, Z14
	VADDPD Z14, Z0, Z0
	VMULSD X11, X8, X12
	VMULSD X11, X12, X12
	VADDSD X12, X15, X15
	ADDQ $8, SI
	ADDQ $8, DI
	DECQ CX
	JNZ weighted

done:
	MOVQ s+56(FP), AX
	VMOVUPD Z2, 0(AX)
	MOVQ errs+64(FP), AX
	VMOVUPD Z0, 0(AX)
	VMOVSD X15, den+80(FP)

	// The choice, as chooseScaleErr makes it: among the lanes j < lanes whose scale is not 0
	// (NaN is not 0), the first whose error is least, counting only errors below +Inf (a NaN
	// or +Inf error is never chosen).
	MOVQ lanes+32(FP), CX
	MOVL $1, DX
	SHLL CX, DX
	DECL DX
	KMOVW DX, K2
	VPXORQ Z1, Z1, Z1
	VCMPPD $4, Z1, Z2, K2, K1 // NEQ_UQ: s_j != 0
	KMOVW K1, DX
	TESTL DX, DX
	JZ noLane
	VBROADCASTSD inf512<>(SB), Z5
	VCMPPD $0x11, Z5, Z0, K1, K3 // LT_OQ: errs_j < +Inf
	KMOVW K3, DX
	TESTL DX, DX
	JZ noChoice
	VMOVAPD Z0, K3, Z5 // the choosable errors, +Inf elsewhere
	VEXTRACTF64X4 $1, Z5, Y6
	VMINPD Y6, Y5, Y6
	VEXTRACTF128 $1, Y6, X7
	VMINPD X7, X6, X7
	VPERMILPD $1, X7, X8
	VMINSD X8, X7, X7
	VBROADCASTSD X7, Z7
	VCMPPD $0, Z7, Z5, K3, K4 // EQ_OQ: the lanes holding the least error
	KMOVW K4, DX
	BSFL DX, DX
	MOVQ DX, best+88(FP)
	VZEROUPPER
	RET

noLane:
	MOVQ $-1, best+88(FP)
	VZEROUPPER
	RET

noChoice:
	MOVQ $-2, best+88(FP)
	VZEROUPPER
	RET

// func QuantCodes8(x *float64, n int, inv float64, lohi *[2]float64, codes *int8) — QuantCodes4,
// eight values at a time, n a positive multiple of 8.
TEXT ·QuantCodes8(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD inv+16(FP), Z4
	MOVQ lohi+24(FP), DX
	VBROADCASTSD 0(DX), Z6
	VBROADCASTSD 8(DX), Z7
	CODECONST
	MOVQ codes+32(FP), DI

q8loop:
	VMOVUPD 0(SI), Z11
	CODEZ
	VCVTTPD2DQ Z13, Y13
	VPMOVSDB Y13, X13
	VMOVQ X13, 0(DI)
	ADDQ $64, SI
	ADDQ $8, DI
	SUBQ $8, CX
	JNZ q8loop
	VZEROUPPER
	RET

// func GPTQScales8(x *float64, n int, u *float64, kp int, s, inv *[8]float64, lohi *[2]float64, buf *float64, errs *[8]float64)
// — GPTQ's loss over one group for eight candidate scales, one in each lane: buf[b] (lanes) starts
// as x[b]; for a = 0..n-1, r = (buf[a] − code·s)/u[a·kp+a] with code = CODEZ(buf[a], inv), the loss
// gains r·r, and buf[b] −= r·u[a·kp+b] for b > a (each product rounded before its sum, no FMA, as
// the scalar loop does). n must be positive; buf holds 8·n values.
TEXT ·GPTQScales8(SB), NOSPLIT, $0-72
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ u+16(FP), DX
	MOVQ kp+24(FP), R8
	SHLQ $3, R8
	MOVQ s+32(FP), AX
	VMOVUPD 0(AX), Z5
	MOVQ inv+40(FP), AX
	VMOVUPD 0(AX), Z4
	MOVQ lohi+48(FP), AX
	VBROADCASTSD 0(AX), Z6
	VBROADCASTSD 8(AX), Z7
	CODECONST
	MOVQ buf+56(FP), DI
	VXORPD Z0, Z0, Z0

	XORQ BX, BX
	MOVQ DI, R10
gsfill:
	VBROADCASTSD (SI)(BX*8), Z1
	VMOVUPD Z1, 0(R10)
	ADDQ $64, R10
	INCQ BX
	CMPQ BX, CX
	JLT gsfill

	XORQ BX, BX
	MOVQ DI, R10
	MOVQ DX, R11
gscol:
	VMOVUPD 0(R10), Z11
	CODEZ
	VMULPD Z5, Z13, Z13
	VSUBPD Z13, Z11, Z15
	VBROADCASTSD (R11)(BX*8), Z16
	VDIVPD Z16, Z15, Z15
	VMULPD Z15, Z15, Z17
	VADDPD Z17, Z0, Z0
	LEAQ 1(BX), R12
	CMPQ R12, CX
	JGE gsnext
	LEAQ 64(R10), R13
gsrow:
	VBROADCASTSD (R11)(R12*8), Z18
	VMULPD Z18, Z15, Z18
	VMOVUPD 0(R13), Z19
	VSUBPD Z18, Z19, Z19
	VMOVUPD Z19, 0(R13)
	ADDQ $64, R13
	INCQ R12
	CMPQ R12, CX
	JLT gsrow
gsnext:
	ADDQ $64, R10
	ADDQ R8, R11
	INCQ BX
	CMPQ BX, CX
	JLT gscol

	MOVQ errs+64(FP), AX
	VMOVUPD Z0, 0(AX)
	VZEROUPPER
	RET
