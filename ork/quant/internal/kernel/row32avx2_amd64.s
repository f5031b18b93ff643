#include "textflag.h"

// The float32 clip search of a row's whole groups on AVX2 (ork/quant/rtn32.go's
// quantizeRowKernel32): RowOne16x8AVX2 for a grid of one factor, RowSearch16x2 for any grid,
// weighted or not. The same operations in the same order as the group kernels of
// search32avx2_amd64.s, so the same bits.

#include "search32avx2.h"

DATA minAmaxBits32<>+0(SB)/4, $0x2B800000 // 2^-40
GLOBL minAmaxBits32<>(SB), RODATA|NOPTR, $4
DATA maxAmaxBits32<>+0(SB)/4, $0x53800000 // 2^40
GLOBL maxAmaxBits32<>(SB), RODATA|NOPTR, $4
DATA infBits64<>+0(SB)/8, $0x7FF0000000000000
GLOBL infBits64<>(SB), RODATA|NOPTR, $8

// AMAXG leaves in ACC the lane maxima of the sign-cleared bit patterns of the R10 chunks of
// sixteen values at R8 (R8 advances past them; Y8 holds the mask, Y9 is scratch).
#define AMAXG(ACC, L) \
	MOVQ R10, CX; \
L: \
	VPAND 0(R8), Y8, Y9; \
	VPMAXUD Y9, ACC, ACC; \
	VPAND 32(R8), Y8, Y9; \
	VPMAXUD Y9, ACC, ACC; \
	ADDQ $64, R8; \
	DECQ CX; \
	JNZ L

// PAIRMAX leaves in A, per 128-bit half, the maxima of A's and B's lanes two apart, interleaved:
// {A0|A2, B0|B2, A1|A3, B1|B3} (| the maximum), Y9 scratch.
#define PAIRMAX(A, B) \
	VPUNPCKLDQ B, A, Y9; \
	VPUNPCKHDQ B, A, A; \
	VPMAXUD Y9, A, A

// QUADMAX leaves in A, per 128-bit half, the maxima of its four groups' lanes (PAIRMAX's A and
// B of two pairs): {g0, g1, g2, g3}, Y9 scratch.
#define QUADMAX(A, B) \
	VPUNPCKLQDQ B, A, Y9; \
	VPUNPCKHQDQ B, A, A; \
	VPMAXUD Y9, A, A

// ONE8 codes the eight values at OFF(R8) with the inverse in Y10 (constants in Y4-Y7 as in
// CODE8): x·x into the lane sums DEN, d·d into E, the codes as int32 in C. Y8 and Y11 are scratch.
#define ONE8(OFF, DEN, E, C) \
	VMOVUPS OFF(R8), Y8; \
	VMULPS Y8, Y8, Y11; \
	VADDPS Y11, DEN, DEN; \
	VMULPS Y10, Y8, Y8; \
	VANDPS Y4, Y8, Y11; \
	VORPS Y5, Y11, Y11; \
	VADDPS Y11, Y8, Y11; \
	VROUNDPS $3, Y11, Y11; \
	VMAXPS Y6, Y11, Y11; \
	VMINPS Y7, Y11, Y11; \
	VSUBPS Y11, Y8, Y8; \
	VCVTTPS2DQ Y11, C; \
	VMULPS Y8, Y8, Y8; \
	VADDPS Y8, E, E

// ONE16 codes the sixteen values at R8 (ONE8 twice): x·x into the lane sums Y0 (lanes 0-7) and Y1
// (8-15), d·d into Y2 and Y3, the sixteen codes at DX. Y8, Y11, Y12 and Y13 are scratch.
#define ONE16 \
	ONE8(0, Y0, Y2, Y12); \
	ONE8(32, Y1, Y3, Y13); \
	VPACKSSDW Y13, Y12, Y12; \
	VPERMQ $0xD8, Y12, Y12; \
	VPACKSSWB Y12, Y12, Y12; \
	VPERMQ $0x08, Y12, Y12; \
	VMOVDQU X12, (DX)

// func RowOne16x8AVX2(x *float32, blocks, group int, f, qmax float64, consts *[32]float32, codes *int8, scales *float32, errs, dens *float64, done *uint8)
//
// RowOne16x8's contract on AVX2 (consts as for ErrSums16x2). A block: the eight groups' amax side
// by side (bit-pattern maxima, as AbsMaxBits8: NaN wins), their scales and inverses in one vector
// each (PrepScales8's operations), then group by group one pass for the codes and the sums (the
// operations of ErrSums16x2 and Codes16x2, reduced by REDUCE2), then the errors in float64.
// The frame: the inverses at 0, the flags of amax in range and s != 0 at 32, den at 64, E at 96.
TEXT ·RowOne16x8AVX2(SB), NOSPLIT, $128-88
	MOVQ x+0(FP), SI
	MOVQ blocks+8(FP), BX
	MOVQ group+16(FP), R10
	SHRQ $4, R10
	MOVQ consts+40(FP), R11
	MOVQ codes+48(FP), DX
	MOVQ scales+56(FP), R13
	MOVQ errs+64(FP), R14
	MOVQ dens+72(FP), R15
	MOVQ done+80(FP), DI

rowBlock:
	// The eight groups' amax: group i's lane maxima in Yi, then reduced into lane i of Y0.
	VPBROADCASTD absBits32<>(SB), Y8
	MOVQ SI, R8
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	AMAXG(Y0, amax0)
	AMAXG(Y1, amax1)
	AMAXG(Y2, amax2)
	AMAXG(Y3, amax3)
	AMAXG(Y4, amax4)
	AMAXG(Y5, amax5)
	AMAXG(Y6, amax6)
	AMAXG(Y7, amax7)
	PAIRMAX(Y0, Y1)
	PAIRMAX(Y2, Y3)
	PAIRMAX(Y4, Y5)
	PAIRMAX(Y6, Y7)
	QUADMAX(Y0, Y2)
	QUADMAX(Y4, Y6)
	VPERM2I128 $0x20, Y4, Y0, Y9
	VPERM2I128 $0x31, Y4, Y0, Y0
	VPMAXUD Y9, Y0, Y0

	// Y10: amax in [2^-40, 2^40] (neither 0 nor NaN). s = float32(f·amax/qmax) in float64 (Y12),
	// inv = 1/s in float32, 0 where s = 0 (Y14); Y10 also needs s != 0.
	VBROADCASTSS minAmaxBits32<>(SB), Y9
	VCMPPS $0x1D, Y9, Y0, Y10 // GE_OQ
	VBROADCASTSS maxAmaxBits32<>(SB), Y9
	VCMPPS $0x12, Y9, Y0, Y11 // LE_OQ
	VANDPS Y11, Y10, Y10
	VBROADCASTSD f+24(FP), Y14
	VBROADCASTSD qmax+32(FP), Y15
	VCVTPS2PD X0, Y12
	VEXTRACTF128 $1, Y0, X13
	VCVTPS2PD X13, Y13
	VMULPD Y14, Y12, Y12
	VDIVPD Y15, Y12, Y12
	VMULPD Y14, Y13, Y13
	VDIVPD Y15, Y13, Y13
	VCVTPD2PSY Y12, X12
	VCVTPD2PSY Y13, X13
	VINSERTF128 $1, X13, Y12, Y12
	VMOVUPS Y12, (R13)
	VBROADCASTSS oneBits32<>(SB), Y13
	VDIVPS Y12, Y13, Y14
	VXORPS Y15, Y15, Y15
	VCMPPS $0, Y15, Y12, Y11 // EQ_OQ
	VANDNPS Y14, Y11, Y14
	VANDNPS Y10, Y11, Y10
	VMOVUPS Y14, 0(SP)
	VMOVUPS Y10, 32(SP)

	// Codes, den and E, group by group.
	VMOVUPS 0(R11), Y4
	VMOVUPS 32(R11), Y5
	VMOVUPS 64(R11), Y6
	VMOVUPS 96(R11), Y7
	MOVQ SI, R8
	XORQ R9, R9

group:
	VBROADCASTSS 0(SP)(R9*4), Y10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ R10, CX

chunk:
	ONE16
	ADDQ $64, R8
	ADDQ $16, DX
	DECQ CX
	JNZ chunk
	REDUCE2(Y0, Y1, X0, 64(SP)(R9*4))
	REDUCE2(Y2, Y3, X2, 96(SP)(R9*4))
	INCQ R9
	CMPQ R9, $8
	JLT group
	MOVQ R8, SI

	// err = (s·s)·E and den in float64; done: the flags and err < +Inf.
	VMOVUPS (R13), Y8
	VCVTPS2PD X8, Y9
	VMULPD Y9, Y9, Y9
	VCVTPS2PD 96(SP), Y10
	VMULPD Y10, Y9, Y9
	VEXTRACTF128 $1, Y8, X8
	VCVTPS2PD X8, Y11
	VMULPD Y11, Y11, Y11
	VCVTPS2PD 112(SP), Y10
	VMULPD Y10, Y11, Y11
	VMOVUPD Y9, 0(R14)
	VMOVUPD Y11, 32(R14)
	VCVTPS2PD 64(SP), Y10
	VMOVUPD Y10, 0(R15)
	VCVTPS2PD 80(SP), Y10
	VMOVUPD Y10, 32(R15)
	VBROADCASTSD infBits64<>(SB), Y12
	VCMPPD $0x11, Y12, Y9, Y9 // LT_OQ
	VCMPPD $0x11, Y12, Y11, Y11
	VMOVMSKPD Y9, AX
	VMOVMSKPD Y11, CX
	SHLQ $4, CX
	ORQ CX, AX
	VMOVUPS 32(SP), Y13
	VMOVMSKPS Y13, CX
	ANDQ CX, AX
	MOVB AX, (DI)
	ADDQ $32, R13
	ADDQ $64, R14
	ADDQ $64, R15
	INCQ DI
	DECQ BX
	JNZ rowBlock
	VZEROUPPER
	RET

DATA seq32<>+0(SB)/4, $0
DATA seq32<>+4(SB)/4, $1
DATA seq32<>+8(SB)/4, $2
DATA seq32<>+12(SB)/4, $3
DATA seq32<>+16(SB)/4, $4
DATA seq32<>+20(SB)/4, $5
DATA seq32<>+24(SB)/4, $6
DATA seq32<>+28(SB)/4, $7
GLOBL seq32<>(SB), RODATA|NOPTR, $32

// REDUCE4 stores at DST (16 bytes) reduce16 of the lane sums of four candidates, in Y0/Y1, Y2/Y3,
// Y4/Y5 and Y6/Y7 (lanes 0-7 / 8-15): REDUCE2's tree for the four at once, so that the choice
// reads them back with one load the store forwards.
#define REDUCE4(DST) \
	VADDPS Y1, Y0, Y0; \
	VADDPS Y3, Y2, Y2; \
	VADDPS Y5, Y4, Y4; \
	VADDPS Y7, Y6, Y6; \
	VPERM2F128 $0x20, Y2, Y0, Y1; \
	VPERM2F128 $0x31, Y2, Y0, Y3; \
	VADDPS Y3, Y1, Y1; \
	VPERM2F128 $0x20, Y6, Y4, Y5; \
	VPERM2F128 $0x31, Y6, Y4, Y7; \
	VADDPS Y7, Y5, Y5; \
	VSHUFPS $0x44, Y5, Y1, Y0; \
	VSHUFPS $0xEE, Y5, Y1, Y2; \
	VADDPS Y2, Y0, Y0; \
	VSHUFPS $0x88, Y0, Y0, Y1; \
	VSHUFPS $0xDD, Y0, Y0, Y2; \
	VADDPS Y2, Y1, Y1; \
	VEXTRACTF128 $1, Y1, X2; \
	VUNPCKLPS X2, X1, X1; \
	VMOVUPS X1, DST

// ERRH adds to ACC the lane sums d·d of the eight values in X with the inverse in Y10, d = y − q,
// y = x·inv, q = clamp(trunc(y + h), lo, hi) — CODE8's q — with h = copysign(0.49999997, x) in H
// (x's sign is y's: RowSearch16x2's inverses are not negative), lo in Y15; Y12 and Y13 scratch.
// WOFF is unused (ERRHW's).
#define ERRH(X, H, ACC, WOFF) \
	VMULPS Y10, X, Y12; \
	VADDPS H, Y12, Y13; \
	VROUNDPS $3, Y13, Y13; \
	VMAXPS Y15, Y13, Y13; \
	VMINPS HI, Y13, Y13; \
	VSUBPS Y13, Y12, Y12; \
	VMULPS Y12, Y12, Y12; \
	VADDPS Y12, ACC, ACC

// ERRHW is ERRH with weights: (wd·d)·d, the eight weights at WOFF(R9).
#define ERRHW(X, H, ACC, WOFF) \
	VMULPS Y10, X, Y12; \
	VADDPS H, Y12, Y13; \
	VROUNDPS $3, Y13, Y13; \
	VMAXPS Y15, Y13, Y13; \
	VMINPS HI, Y13, Y13; \
	VSUBPS Y13, Y12, Y12; \
	VMULPS WOFF(R9), Y12, Y13; \
	VMULPS Y12, Y13, Y13; \
	VADDPS Y13, ACC, ACC

// CANDS4(FIRST, L, NEXT, ERR) adds to Y0-Y7 the lane sums of the candidates FIRST to FIRST+3 (the
// inverses at 32(R12); those left at 72(SP): at most four are summed) by ERR (ERRH, or ERRHW with
// the group's weights from 64(SP), walked in R9) over the R10 chunks at SI: each chunk's values in
// Y8/Y9 and their h in Y11/Y14 for all four.
#define CANDS4(FIRST, L, NEXT, ERR) \
	MOVQ SI, AX; \
	MOVQ 64(SP), R9; \
	MOVQ R10, CX; \
L: \
	VMOVUPS 0(SI), Y8; \
	VMOVUPS 32(SI), Y9; \
	VANDPS SIGN, Y8, Y11; \
	VORPS HALF, Y11, Y11; \
	VANDPS SIGN, Y9, Y14; \
	VORPS HALF, Y14, Y14; \
	VBROADCASTSS 32+4*FIRST(R12), Y10; \
	ERR(Y8, Y11, Y0, 0); \
	ERR(Y9, Y14, Y1, 32); \
	CMPQ 72(SP), $1; \
	JLE NEXT; \
	VBROADCASTSS 36+4*FIRST(R12), Y10; \
	ERR(Y8, Y11, Y2, 0); \
	ERR(Y9, Y14, Y3, 32); \
	CMPQ 72(SP), $2; \
	JLE NEXT; \
	VBROADCASTSS 40+4*FIRST(R12), Y10; \
	ERR(Y8, Y11, Y4, 0); \
	ERR(Y9, Y14, Y5, 32); \
	CMPQ 72(SP), $3; \
	JLE NEXT; \
	VBROADCASTSS 44+4*FIRST(R12), Y10; \
	ERR(Y8, Y11, Y6, 0); \
	ERR(Y9, Y14, Y7, 32); \
NEXT: \
	ADDQ $64, SI; \
	ADDQ $64, R9; \
	DECQ CX; \
	JNZ L; \
	MOVQ AX, SI

// ZERO8 clears Y0-Y7.
#define ZERO8 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7

// DENX adds x·x of the eight values at OFF(AX) to ACC; DENW (wd·x)·x, the weights at OFF(R9).
// Y12 and Y13 scratch.
#define DENX(OFF, ACC) \
	VMOVUPS OFF(AX), Y12; \
	VMULPS Y12, Y12, Y12; \
	VADDPS Y12, ACC, ACC

#define DENW(OFF, ACC) \
	VMOVUPS OFF(AX), Y12; \
	VMULPS OFF(R9), Y12, Y13; \
	VMULPS Y12, Y13, Y13; \
	VADDPS Y13, ACC, ACC

// GROUPSUMS stores in the group's table entry (R12) its den (by DEN) and its sums E_j (by ERR) over
// the R10 chunks at SI, the weights (if any) at 64(SP); then SI, 64(SP) and R12 move to the next
// group and the batch's counter at 48(SP) counts down (the flags are DECQ's).
#define GROUPSUMS(DEN, ERR, DL, P0, P0N, P1, P1N, NEXT) \
	VXORPS Y8, Y8, Y8; \
	VXORPS Y9, Y9, Y9; \
	MOVQ SI, AX; \
	MOVQ 64(SP), R9; \
	MOVQ R10, CX; \
DL: \
	DEN(0, Y8); \
	DEN(32, Y9); \
	ADDQ $64, AX; \
	ADDQ $64, R9; \
	DECQ CX; \
	JNZ DL; \
	REDUCE2(Y8, Y9, X8, 96(R12)); \
	MOVQ lanes+40(FP), AX; \
	MOVQ AX, 72(SP); \
	ZERO8; \
	CANDS4(0, P0, P0N, ERR); \
	REDUCE4(64(R12)); \
	SUBQ $4, 72(SP); \
	JLE NEXT; \
	ZERO8; \
	CANDS4(4, P1, P1N, ERR); \
	REDUCE4(80(R12)); \
NEXT: \
	MOVQ R10, AX; \
	SHLQ $6, AX; \
	ADDQ AX, SI; \
	ADDQ AX, 64(SP); \
	ADDQ $128, R12; \
	DECQ 48(SP)

// func RowSearch16x2(x, wd *float32, groups, group int, grid *[8]float64, lanes int, qmax float64, consts *[32]float32, codes *int8, scales *float32, errs, dens *float64, done *uint8)
//
// The whole float32 clip search of groups whole groups, eight groups (a batch) at a time, in three
// passes over the batch so that no group waits on the one before it: (1) each group's amax
// (AbsMaxBits8's maxima) and candidates (PrepScales8's operations); (2) its sums (ErrSums16x2's,
// weighted or not); (3) choose32's choice, in float64 vectors, and Codes16x2's codes. The factors must
// not be negative (the sums take the sign of x·inv from x). A group outside the float32 range gets
// scales and inverses of 0, so no candidate may be chosen and it is left to the caller. The frame:
// the lane mask (j < lanes) at 0, the batch's group count at 32 and first value at 40, a counter
// at 48, the batch's first weight at 56 (0: unweighted), the group's at 64, the candidates left at
// 72; the table at 128, 128 bytes a group: its scales, inverses, sums E_j and den.
TEXT ·RowSearch16x2(SB), $1152-104
	MOVQ x+0(FP), SI
	MOVQ wd+8(FP), AX
	MOVQ AX, 56(SP)
	MOVQ AX, 64(SP)
	MOVQ groups+16(FP), BX
	MOVQ group+24(FP), R10
	SHRQ $4, R10
	MOVQ grid+32(FP), R11
	MOVQ consts+56(FP), R8
	MOVQ codes+64(FP), DX
	MOVQ scales+72(FP), R13
	MOVQ errs+80(FP), R14
	MOVQ dens+88(FP), R15
	MOVQ done+96(FP), DI
	MOVQ lanes+40(FP), AX
	VMOVQ AX, X0
	VPBROADCASTD X0, Y0
	VMOVDQU seq32<>(SB), Y1
	VPCMPGTD Y1, Y0, Y0 // lane j < lanes
	VMOVDQU Y0, 0(SP)

batch:
	MOVQ $8, R9
	CMPQ BX, R9
	CMOVQLT BX, R9
	MOVQ R9, 32(SP)
	MOVQ SI, 40(SP)
	SUBQ R9, BX
	MOVQ SI, AX
	LEAQ 128(SP), R12

prep:
	// amax by bit patterns, then sj = float32(grid_j·amax/qmax) and inv = 1/sj (0 where sj = 0),
	// both 0 for j >= lanes and for a group outside [2^-40, 2^40] (0 and NaN included).
	VPBROADCASTD absBits32<>(SB), Y2
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	MOVQ R10, CX
amax:
	VPAND 0(AX), Y2, Y3
	VPMAXUD Y3, Y0, Y0
	VPAND 32(AX), Y2, Y3
	VPMAXUD Y3, Y1, Y1
	ADDQ $64, AX
	DECQ CX
	JNZ amax
	MAXREDUCE
	VPBROADCASTD X0, Y4
	VBROADCASTSS minAmaxBits32<>(SB), Y5
	VCMPPS $0x1D, Y5, Y4, Y5 // GE_OQ
	VBROADCASTSS maxAmaxBits32<>(SB), Y6
	VCMPPS $0x12, Y6, Y4, Y6 // LE_OQ
	VANDPS Y6, Y5, Y5
	VANDPS 0(SP), Y5, Y5
	VCVTSS2SD X0, X0, X0
	VBROADCASTSD X0, Y0
	VBROADCASTSD qmax+48(FP), Y1
	SCALES8(R11)
	VANDPS Y5, Y2, Y2
	VMOVUPS Y2, 0(R12)
	INV8
	VMOVUPS Y5, 32(R12)
	ADDQ $128, R12
	DECQ R9
	JNZ prep

	// The sums of each group: x·x into Y8/Y9, then four candidates a pass.
	MOVQ 40(SP), SI
	LEAQ 128(SP), R12
	MOVQ 32(SP), AX
	MOVQ AX, 48(SP)
	VMOVUPS LO, Y15
	MOVQ 56(SP), AX
	TESTQ AX, AX
	JNZ sumsW

sums:
	GROUPSUMS(DENX, ERRH, den, pass0, pass0Next, pass1, pass1Next, sumsNext)
	JNZ sums
	JMP chooseBatch

sumsW:
	// The same with weights: (wd·x)·x and (wd·d)·d.
	MOVQ AX, 64(SP)
sumsWLoop:
	GROUPSUMS(DENW, ERRHW, denW, wpass0, wpass0Next, wpass1, wpass1Next, sumsWNext)
	JNZ sumsWLoop
	MOVQ 64(SP), AX
	MOVQ AX, 56(SP)

chooseBatch:
	// Each group's choice and codes: v_j = (s_j·s_j)·E_j in float64; the candidates with s_j != 0
	// and v_j < +Inf (the others +Inf here); the first least v_j wins. None: undone.
	MOVQ 40(SP), SI
	LEAQ 128(SP), R12
	MOVQ 32(SP), AX
	MOVQ AX, 48(SP)

choose:
	VCVTPS2PD 0(R12), Y0
	VCVTPS2PD 16(R12), Y1
	VCVTPS2PD 64(R12), Y2
	VCVTPS2PD 80(R12), Y3
	VXORPD Y4, Y4, Y4
	VCMPPD $4, Y4, Y0, Y5 // s != 0 (NEQ_UQ)
	VCMPPD $4, Y4, Y1, Y6
	VMULPD Y0, Y0, Y0
	VMULPD Y2, Y0, Y0
	VMULPD Y1, Y1, Y1
	VMULPD Y3, Y1, Y1
	VBROADCASTSD infBits64<>(SB), Y7
	VCMPPD $0x11, Y7, Y0, Y2 // v < +Inf (LT_OQ)
	VCMPPD $0x11, Y7, Y1, Y3
	VANDPD Y2, Y5, Y5
	VANDPD Y3, Y6, Y6
	VBLENDVPD Y5, Y0, Y7, Y0 // v where it may be chosen, else +Inf
	VBLENDVPD Y6, Y1, Y7, Y1
	VMINPD Y1, Y0, Y2
	VPERM2F128 $0x01, Y2, Y2, Y3
	VMINPD Y3, Y2, Y2
	VPERMILPD $0x05, Y2, Y3
	VMINPD Y3, Y2, Y2 // the least, in every lane
	VUCOMISD X7, X2
	JAE undone
	VCMPPD $0, Y2, Y0, Y0 // EQ_OQ
	VCMPPD $0, Y2, Y1, Y1
	VMOVMSKPD Y0, AX
	VMOVMSKPD Y1, CX
	SHLQ $4, CX
	ORQ CX, AX
	BSFQ AX, R9

	// The codes with inv[best]; the group's answers.
	VBROADCASTSS 32(R12)(R9*4), Y10
	MOVQ R10, CX
	MOVQ DX, AX
codes:
	CODE8(0)
	VCVTTPS2DQ Y13, Y0
	CODE8(32)
	VCVTTPS2DQ Y13, Y1
	VPACKSSDW Y1, Y0, Y0
	VPERMQ $0xD8, Y0, Y0
	VPACKSSWB Y0, Y0, Y0
	VPERMQ $0x08, Y0, Y0
	VMOVDQU X0, (AX)
	ADDQ $64, SI
	ADDQ $16, AX
	DECQ CX
	JNZ codes
	MOVL 0(R12)(R9*4), AX
	MOVL AX, (R13)
	VMOVSD X2, (R14)
	VMOVSS 96(R12), X3
	VCVTSS2SD X3, X3, X3
	VMOVSD X3, (R15)
	MOVB $1, (DI)
	JMP next

undone:
	MOVB $0, (DI)
	MOVQ R10, AX
	SHLQ $6, AX
	ADDQ AX, SI

next:
	MOVQ R10, AX
	SHLQ $4, AX
	ADDQ AX, DX
	ADDQ $4, R13
	ADDQ $8, R14
	ADDQ $8, R15
	INCQ DI
	ADDQ $128, R12
	DECQ 48(SP)
	JNZ choose
	TESTQ BX, BX
	JNZ batch
	VZEROUPPER
	RET
