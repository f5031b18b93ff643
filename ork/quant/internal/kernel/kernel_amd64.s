#include "textflag.h"

// CODE leaves in Y13 quantCode(x, inv) for the x in Y11 and the inverses in INV: y = x·inv,
// t = trunc(y), q = t + trunc(2·(y − t)) (y − t and its double are exact, and trunc(2r) is ±1
// exactly when |r| >= 0.5: math.Round), clamped to [Y6, Y7].
#define CODE(INV) \
	VMULPD INV, Y11, Y12; \
	VROUNDPD $3, Y12, Y13; \
	VSUBPD Y13, Y12, Y14; \
	VADDPD Y14, Y14, Y14; \
	VROUNDPD $3, Y14, Y14; \
	VADDPD Y14, Y13, Y13; \
	VMAXPD Y6, Y13, Y13; \
	VMINPD Y7, Y13, Y13

// ERR adds d·d to ACC for d = x − q·S (q in Y13 from CODE).
#define ERR(S, ACC) \
	VMULPD S, Y13, Y13; \
	VSUBPD Y13, Y11, Y13; \
	VMULPD Y13, Y13, Y13; \
	VADDPD Y13, ACC, ACC

// WERR adds (wd·d)·d to ACC, wd broadcast in Y8.
#define WERR(S, ACC) \
	VMULPD S, Y13, Y13; \
	VSUBPD Y13, Y11, Y13; \
	VMULPD Y13, Y8, Y14; \
	VMULPD Y13, Y14, Y14; \
	VADDPD Y14, ACC, ACC

// GQ1SUM adds the four terms in Y13 to X0 and the four in Y12 to X1, lane 0 first (sums in element
// order; uses Y14).
#define GQ1SUM \
	VADDSD X13, X0, X0; \
	VADDSD X12, X1, X1; \
	VPERMILPD $1, X13, X14; \
	VADDSD X14, X0, X0; \
	VPERMILPD $1, X12, X14; \
	VADDSD X14, X1, X1; \
	VEXTRACTF128 $1, Y13, X13; \
	VEXTRACTF128 $1, Y12, X12; \
	VADDSD X13, X0, X0; \
	VADDSD X12, X1, X1; \
	VPERMILPD $1, X13, X14; \
	VADDSD X14, X0, X0; \
	VPERMILPD $1, X12, X14; \
	VADDSD X14, X1, X1

// func ClipErrs8(x, wd *float64, n int, s, inv *float64, lohi *[2]float64, errs *float64)
TEXT ·ClipErrs8(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ wd+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ s+24(FP), AX
	MOVQ inv+32(FP), BX
	MOVQ lohi+40(FP), DX
	VMOVUPD 0(AX), Y2
	VMOVUPD 32(AX), Y3
	VMOVUPD 0(BX), Y4
	VMOVUPD 32(BX), Y5
	VBROADCASTSD 0(DX), Y6
	VBROADCASTSD 8(DX), Y7
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	TESTQ CX, CX
	JZ done
	TESTQ DI, DI
	JNZ weighted

plain:
	VBROADCASTSD (SI), Y11
	CODE(Y4)
	ERR(Y2, Y0)
	CODE(Y5)
	ERR(Y3, Y1)
	ADDQ $8, SI
	DECQ CX
	JNZ plain
	JMP done

weighted:
	VBROADCASTSD (SI), Y11
	VBROADCASTSD (DI), Y8
	CODE(Y4)
	WERR(Y2, Y0)
	CODE(Y5)
	WERR(Y3, Y1)
	ADDQ $8, SI
	ADDQ $8, DI
	DECQ CX
	JNZ weighted

done:
	MOVQ errs+48(FP), AX
	VMOVUPD Y0, 0(AX)
	VMOVUPD Y1, 32(AX)
	VZEROUPPER
	RET

DATA clipAbs<>+0(SB)/8, $0x7FFFFFFFFFFFFFFF
GLOBL clipAbs<>(SB), RODATA|NOPTR, $8

// func ClipErrs4(x, wd *float64, n int, s, inv *float64, lohi *[2]float64, errs *float64) —
// ClipErrs8 for four candidates (one register).
TEXT ·ClipErrs4(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ wd+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ s+24(FP), AX
	MOVQ inv+32(FP), BX
	MOVQ lohi+40(FP), DX
	VMOVUPD 0(AX), Y2
	VMOVUPD 0(BX), Y4
	VBROADCASTSD 0(DX), Y6
	VBROADCASTSD 8(DX), Y7
	VXORPD Y0, Y0, Y0
	TESTQ CX, CX
	JZ done4
	TESTQ DI, DI
	JNZ weighted4

plain4:
	VBROADCASTSD (SI), Y11
	CODE(Y4)
	ERR(Y2, Y0)
	ADDQ $8, SI
	DECQ CX
	JNZ plain4
	JMP done4

weighted4:
	VBROADCASTSD (SI), Y11
	VBROADCASTSD (DI), Y8
	CODE(Y4)
	WERR(Y2, Y0)
	ADDQ $8, SI
	ADDQ $8, DI
	DECQ CX
	JNZ weighted4

done4:
	MOVQ errs+48(FP), AX
	VMOVUPD Y0, 0(AX)
	VZEROUPPER
	RET

// func AbsMax4(x *float64, n int) float64 — max |x_k| over n values, n a positive multiple of 4.
TEXT ·AbsMax4(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD clipAbs<>(SB), Y3
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	CMPQ CX, $8
	JLT tail4

loop8:
	VANDPD 0(SI), Y3, Y2
	VMAXPD Y0, Y2, Y0
	VANDPD 32(SI), Y3, Y2
	VMAXPD Y1, Y2, Y1
	ADDQ $64, SI
	SUBQ $8, CX
	CMPQ CX, $8
	JGE loop8

tail4:
	TESTQ CX, CX
	JZ reduce
	VANDPD 0(SI), Y3, Y2
	VMAXPD Y0, Y2, Y0

reduce:
	VMAXPD Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPD X1, X0, X0
	VPERMILPD $1, X0, X1
	VMAXSD X1, X0, X0
	VMOVSD X0, ret+16(FP)
	VZEROUPPER
	RET

// func QuantCodes4(x *float64, n int, inv float64, lohi *[2]float64, codes *int8) — codes[k] =
// quantCode(x_k, inv) for n values, n a positive multiple of 4.
TEXT ·QuantCodes4(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD inv+16(FP), Y4
	MOVQ lohi+24(FP), DX
	VBROADCASTSD 0(DX), Y6
	VBROADCASTSD 8(DX), Y7
	MOVQ codes+32(FP), DI

qloop:
	VMOVUPD 0(SI), Y11
	CODE(Y4)
	VCVTTPD2DQY Y13, X13
	VPACKSSDW X13, X13, X13
	VPACKSSWB X13, X13, X13
	VMOVD X13, AX
	MOVL AX, 0(DI)
	ADDQ $32, SI
	ADDQ $4, DI
	SUBQ $4, CX
	JNZ qloop
	VZEROUPPER
	RET

// func SubScaled(y, x *float64, n int, e float64) — y[j] = y[j] − e·x[j] for j < n (a multiply,
// then a subtract: no fused multiply-add).
TEXT ·SubScaled(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSD e+24(FP), Y0
	CMPQ CX, $8
	JLT sub4

sub8:
	VMULPD 0(SI), Y0, Y1
	VMULPD 32(SI), Y0, Y2
	VMOVUPD 0(DI), Y3
	VMOVUPD 32(DI), Y4
	VSUBPD Y1, Y3, Y3
	VSUBPD Y2, Y4, Y4
	VMOVUPD Y3, 0(DI)
	VMOVUPD Y4, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $8, CX
	CMPQ CX, $8
	JGE sub8

sub4:
	CMPQ CX, $4
	JLT sub1
	VMULPD 0(SI), Y0, Y1
	VMOVUPD 0(DI), Y3
	VSUBPD Y1, Y3, Y3
	VMOVUPD Y3, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $4, CX

sub1:
	TESTQ CX, CX
	JZ subdone
	VMOVSD 0(SI), X1
	VMULSD X0, X1, X1
	VMOVSD 0(DI), X3
	VSUBSD X1, X3, X3
	VMOVSD X3, 0(DI)
	ADDQ $8, SI
	ADDQ $8, DI
	DECQ CX
	JMP sub1

subdone:
	VZEROUPPER
	RET

DATA expMask<>+0(SB)/4, $0x7F800000
GLOBL expMask<>(SB), RODATA|NOPTR, $4

// func NonFinite8(x *float32, n int) bool — whether one of the n values at x (n a positive
// multiple of 8) has all exponent bits set (±Inf or NaN).
TEXT ·NonFinite8(SB), NOSPLIT, $0-17
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VPBROADCASTD expMask<>(SB), Y1
	VPXOR Y0, Y0, Y0

nf8:
	VPAND 0(SI), Y1, Y2
	VPCMPEQD Y1, Y2, Y2
	VPOR Y2, Y0, Y0
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ nf8
	VPTEST Y0, Y0
	SETNE ret+16(FP)
	VZEROUPPER
	RET

// func GroupQuant1(x, wd *float64, n int, s, inv float64, lohi *[2]float64, codes *int8) (err, den float64)
// — one candidate, four values at a time: codes[k] = q_k = quantCode(x_k, inv), and, in order
// from k = 0, err += d·d (wd: (wd_k·d)·d) with d = x_k − q_k·s, den += x_k·x_k (wd: (wd_k·x_k)·x_k);
// n a positive multiple of 4.
TEXT ·GroupQuant1(SB), NOSPLIT, $0-72
	MOVQ x+0(FP), SI
	MOVQ wd+8(FP), R8
	MOVQ n+16(FP), CX
	VBROADCASTSD s+24(FP), Y2
	VBROADCASTSD inv+32(FP), Y4
	MOVQ lohi+40(FP), DX
	VBROADCASTSD 0(DX), Y6
	VBROADCASTSD 8(DX), Y7
	MOVQ codes+48(FP), DI
	VXORPD X0, X0, X0
	VXORPD X1, X1, X1
	TESTQ R8, R8
	JNZ gq1w

gq1:
	VMOVUPD 0(SI), Y11
	CODE(Y4)
	VCVTTPD2DQY Y13, X15
	VPACKSSDW X15, X15, X15
	VPACKSSWB X15, X15, X15
	VMOVD X15, AX
	MOVL AX, 0(DI)
	VMULPD Y2, Y13, Y13
	VSUBPD Y13, Y11, Y13
	VMULPD Y13, Y13, Y13
	VMULPD Y11, Y11, Y12
	GQ1SUM
	ADDQ $32, SI
	ADDQ $4, DI
	SUBQ $4, CX
	JNZ gq1
	JMP gq1done

gq1w:
	VMOVUPD 0(SI), Y11
	CODE(Y4)
	VCVTTPD2DQY Y13, X15
	VPACKSSDW X15, X15, X15
	VPACKSSWB X15, X15, X15
	VMOVD X15, AX
	MOVL AX, 0(DI)
	VMOVUPD 0(R8), Y8
	VMULPD Y2, Y13, Y13
	VSUBPD Y13, Y11, Y13
	VMULPD Y13, Y8, Y14
	VMULPD Y13, Y14, Y13
	VMULPD Y11, Y8, Y12
	VMULPD Y11, Y12, Y12
	GQ1SUM
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $4, DI
	SUBQ $4, CX
	JNZ gq1w

gq1done:
	VMOVSD X0, err+56(FP)
	VMOVSD X1, den+64(FP)
	VZEROUPPER
	RET
