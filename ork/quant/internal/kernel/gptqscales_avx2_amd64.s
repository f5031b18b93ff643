#include "textflag.h"

// GPTQScales8 on AVX2: the eight candidates in two registers of four float64 (lanes 0-3 and 4-7),
// the same operations in the same order, so the same losses bit for bit.

DATA sign64<>+0(SB)/8, $0x8000000000000000
GLOBL sign64<>(SB), RODATA|NOPTR, $8
DATA half64<>+0(SB)/8, $0x3FDFFFFFFFFFFFFF // the float64 below 0.5
GLOBL half64<>(SB), RODATA|NOPTR, $8

// RESID leaves in R the residual (y − code·s)/u_aa of the four lanes of y at OFF(R10), with the
// inverses INV, scales S and u_aa in Y13: code = clamp(round-half-away(y·inv), lo, hi) (lo Y6, hi
// Y7, the sign mask Y8, the float64 below 0.5 Y9), rounded as CODEZ does; the loss E gains R·R.
// Y10-Y12 scratch.
#define RESID(OFF, INV, S, R, E) \
	VMOVUPD OFF(R10), Y10; \
	VMULPD INV, Y10, Y11; \
	VANDPD Y8, Y11, Y12; \
	VORPD Y9, Y12, Y12; \
	VADDPD Y12, Y11, Y12; \
	VROUNDPD $3, Y12, Y12; \
	VMAXPD Y6, Y12, Y12; \
	VMINPD Y7, Y12, Y12; \
	VMULPD S, Y12, Y12; \
	VSUBPD Y12, Y10, R; \
	VDIVPD Y13, R, R; \
	VMULPD R, R, Y12; \
	VADDPD Y12, E, E

// func GPTQScales8AVX2(x *float64, n int, u *float64, kp int, s, inv *[8]float64, lohi *[2]float64, buf *float64, errs *[8]float64)
TEXT ·GPTQScales8AVX2(SB), NOSPLIT, $0-72
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ u+16(FP), DX
	MOVQ kp+24(FP), R8
	SHLQ $3, R8
	MOVQ s+32(FP), AX
	VMOVUPD 0(AX), Y2
	VMOVUPD 32(AX), Y3
	MOVQ inv+40(FP), AX
	VMOVUPD 0(AX), Y4
	VMOVUPD 32(AX), Y5
	MOVQ lohi+48(FP), AX
	VBROADCASTSD 0(AX), Y6
	VBROADCASTSD 8(AX), Y7
	VBROADCASTSD sign64<>(SB), Y8
	VBROADCASTSD half64<>(SB), Y9
	MOVQ buf+56(FP), DI
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1

	// buf[b·8 + j] = x[b] for every lane j.
	XORQ BX, BX
	MOVQ DI, R10
fill:
	VBROADCASTSD (SI)(BX*8), Y10
	VMOVUPD Y10, 0(R10)
	VMOVUPD Y10, 32(R10)
	ADDQ $64, R10
	INCQ BX
	CMPQ BX, CX
	JLT fill

	XORQ BX, BX
	MOVQ DI, R10
	MOVQ DX, R11
col:
	VBROADCASTSD (R11)(BX*8), Y13
	RESID(0, Y4, Y2, Y14, Y0)
	RESID(32, Y5, Y3, Y15, Y1)
	LEAQ 1(BX), R12
	CMPQ R12, CX
	JGE next
	LEAQ 64(R10), R13
row:
	VBROADCASTSD (R11)(R12*8), Y10
	VMULPD Y10, Y14, Y11
	VMOVUPD 0(R13), Y12
	VSUBPD Y11, Y12, Y12
	VMOVUPD Y12, 0(R13)
	VMULPD Y10, Y15, Y11
	VMOVUPD 32(R13), Y12
	VSUBPD Y11, Y12, Y12
	VMOVUPD Y12, 32(R13)
	ADDQ $64, R13
	INCQ R12
	CMPQ R12, CX
	JLT row
next:
	ADDQ $64, R10
	ADDQ R8, R11
	INCQ BX
	CMPQ BX, CX
	JLT col

	MOVQ errs+64(FP), AX
	VMOVUPD Y0, 0(AX)
	VMOVUPD Y1, 32(AX)
	VZEROUPPER
	RET
