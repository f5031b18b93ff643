#include "textflag.h"

// GroupSearch16: RTN's clip search in float32 (see ork/quant/rtn32.go for the arithmetic it
// shares, bit for bit, with groupSearch32Go). Sixteen values of the group in the lanes of one ZMM
// register, each candidate's lane sums in its own register (Z24-Z31), the last chunk of a group
// loaded under a mask (its missing values are 0 and add 0). Only AVX-512 F (and VL) instructions.

DATA abs32<>+0(SB)/4, $0x7FFFFFFF
GLOBL abs32<>(SB), RODATA|NOPTR, $4

DATA sign32<>+0(SB)/4, $0x80000000
GLOBL sign32<>(SB), RODATA|NOPTR, $4

DATA half32<>+0(SB)/4, $0x3EFFFFFF
GLOBL half32<>(SB), RODATA|NOPTR, $4

DATA one32<>+0(SB)/4, $0x3F800000
GLOBL one32<>(SB), RODATA|NOPTR, $4

DATA minAmax32<>+0(SB)/4, $0x2B800000
GLOBL minAmax32<>(SB), RODATA|NOPTR, $4

DATA maxAmax32<>+0(SB)/4, $0x53800000
GLOBL maxAmax32<>(SB), RODATA|NOPTR, $4

DATA infD32<>+0(SB)/8, $0x7FF0000000000000
GLOBL infD32<>(SB), RODATA|NOPTR, $8

// The lanes of the reduction's last vector that hold E_0..E_7 (see REDUCE8).
DATA eidx32<>+0(SB)/4, $0
DATA eidx32<>+4(SB)/4, $4
DATA eidx32<>+8(SB)/4, $8
DATA eidx32<>+12(SB)/4, $12
DATA eidx32<>+16(SB)/4, $1
DATA eidx32<>+20(SB)/4, $5
DATA eidx32<>+24(SB)/4, $9
DATA eidx32<>+28(SB)/4, $13
GLOBL eidx32<>(SB), RODATA|NOPTR, $32

// CODE32 leaves in Z11 clamp(round-half-away(y), lo, hi) for y = x·inv in Z10 (x in Z3, inv in
// INV): trunc(y + copysign(0.49999997, y)) with the sign mask in Z1, 0.49999997 in Z2, lo in Z6,
// hi in Z7. VPTERNLOGD $0xEA is (y & sign) | half.
#define CODE32(INV) \
	VMULPS INV, Z3, Z10; \
	VMOVAPS Z10, Z11; \
	VPTERNLOGD $0xEA, Z2, Z1, Z11; \
	VADDPS Z11, Z10, Z11; \
	VRNDSCALEPS $3, Z11, Z11; \
	VMAXPS Z6, Z11, Z11; \
	VMINPS Z7, Z11, Z11

// NEAR32 leaves in Z11 clamp(round-half-even(y), lo, hi) for y = x·inv in Z10 (x in Z3, inv in
// INV; lo in Z6, hi in Z7). It differs from CODE32's q only where y is exactly halfway between two
// integers, and there y − q is +0.5 for one and −0.5 for the other (or the same q, when the clamp
// takes both to lo or hi): d·d and (wd·d)·d are the same bits, so the candidates' error sums are
// CODE32's, in two instructions fewer. The codes themselves always come from CODE32.
#define NEAR32(INV) \
	VMULPS INV, Z3, Z10; \
	VRNDSCALEPS $0, Z10, Z11; \
	VMAXPS Z6, Z11, Z11; \
	VMINPS Z7, Z11, Z11

// CAND adds d·d (d = y − q) to ACC; CANDW adds (wd·d)·d, the weights in Z4.
#define CAND(INV, ACC) \
	NEAR32(INV); \
	VSUBPS Z11, Z10, Z11; \
	VMULPS Z11, Z11, Z11; \
	VADDPS Z11, ACC, ACC

#define CANDW(INV, ACC) \
	NEAR32(INV); \
	VSUBPS Z11, Z10, Z11; \
	VMULPS Z4, Z11, Z12; \
	VMULPS Z11, Z12, Z12; \
	VADDPS Z12, ACC, ACC

// LASTMASK sets K7 to the lanes of the last chunk of N values (N > 0): ((N-1) mod 16) + 1 of
// them. It uses AX and CX.
#define LASTMASK(N) \
	LEAQ -1(N), CX; \
	ANDQ $15, CX; \
	INCQ CX; \
	MOVL $1, AX; \
	SHLL CX, AX; \
	DECL AX; \
	KMOVW AX, K7

// NEXTMASK sets K5 to the chunk's mask: K7 for the last chunk (R12 = 1), else K6 (all lanes).
#define NEXTMASK(L) \
	CMPQ R12, $1; \
	JNE L; \
	KMOVW K7, K5; \
L:

// PAIR16 adds the lanes 8 apart of A and B: A becomes [A(l)+A(l+8), l < 8 | B(l)+B(l+8), l < 8].
#define PAIR16(A, B) \
	VSHUFF32X4 $0x44, B, A, Z10; \
	VSHUFF32X4 $0xEE, B, A, Z11; \
	VADDPS Z11, Z10, A

// PAIR8 adds the lanes 4 apart within each half of A and B (as left by PAIR16): A becomes the
// four-lane sums of A's halves, then of B's halves.
#define PAIR8(A, B) \
	VSHUFF32X4 $0x88, B, A, Z10; \
	VSHUFF32X4 $0xDD, B, A, Z11; \
	VADDPS Z11, Z10, A

// REDUCE1 leaves in the low lane of X (Z's low 128 bits, Y its low 256) reduce16 of Z's lanes:
// lanes 8 apart, then 4, 2 and 1 apart, with T (TX its low 128 bits) as scratch.
#define REDUCE1(Z, Y, X, T, TX) \
	VEXTRACTF64X4 $1, Z, T; \
	VADDPS T, Y, Y; \
	VEXTRACTF32X4 $1, Y, TX; \
	VADDPS TX, X, X; \
	VSHUFPS $0xEE, X, X, TX; \
	VADDPS TX, X, X; \
	VMOVSHDUP X, TX; \
	VADDSS TX, X, X

// func GroupPrep16(x *float32, n, group int, grid *[8]float64, lanes int, qmax float64, tab *float32)
TEXT ·GroupPrep16(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	MOVQ group+16(FP), R9
	MOVQ grid+24(FP), AX
	MOVQ lanes+32(FP), R11
	VMOVUPD (AX), Z20
	VBROADCASTSD qmax+40(FP), Z21
	MOVQ tab+48(FP), R13
	VBROADCASTSS abs32<>(SB), Z3
	VBROADCASTSS one32<>(SB), Y22
	VPXORD Y23, Y23, Y23
	KXNORW K6, K6, K6

prepGroup:
	// The group's length: min(group, values left); K7 its last chunk's lanes, R12 its chunks.
	MOVQ R9, R10
	CMPQ BX, R10
	CMOVQLT BX, R10
	LASTMASK(R10)
	LEAQ 15(R10), R12
	SHRQ $4, R12
	KMOVW K6, K5
	MOVQ SI, R8
	VPXORD Z0, Z0, Z0
prepLoop:
	NEXTMASK(prepFull)
	VMOVUPS.Z (R8), K5, Z1
	VPANDD Z1, Z3, Z1
	VMAXPS Z1, Z0, Z0
	ADDQ $64, R8
	DECQ R12
	JNZ prepLoop
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VSHUFPS $0xEE, X0, X0, X1
	VMAXPS X1, X0, X0
	VMOVSHDUP X0, X1
	VMAXSS X1, X0, X0
	VMOVSS X0, 64(R13)

	// s_j = float32(grid_j·amax/qmax) in float64; inv_j = 1/s_j in float32, 0 where s_j = 0.
	VCVTSS2SD X0, X0, X1
	CMPQ R11, $1
	JEQ prepOne
	VBROADCASTSD X1, Z8
	VMULPD Z20, Z8, Z9
	VDIVPD Z21, Z9, Z9
	VCVTPD2PS Z9, Y9
	VCMPPS $4, Y23, Y9, K1
	VDIVPS.Z Y9, Y22, K1, Y12
	VMOVUPS Y9, (R13)
	VMOVUPS Y12, 32(R13)
	JMP prepNext

prepOne:
	// One factor: the same arithmetic on the first lane alone (scalar divisions, a fraction of
	// the vector ones' cost), the other seven scales and inverses 0.
	VMULSD X20, X1, X9
	VDIVSD X21, X9, X9
	VCVTSD2SS X9, X9, X9
	VXORPS X12, X12, X12
	VUCOMISS X23, X9
	JPS prepOneDiv // NaN is not 0
	JEQ prepOneStore
prepOneDiv:
	VDIVSS X9, X22, X12
prepOneStore:
	VMOVUPS Y23, (R13)
	VMOVUPS Y23, 32(R13)
	VMOVSS X9, (R13)
	VMOVSS X12, 32(R13)

prepNext:
	LEAQ (SI)(R10*4), SI
	ADDQ $128, R13
	SUBQ R10, BX
	JNZ prepGroup
	VZEROUPPER
	RET

// func GroupSearch16(x, wd *float32, n, lanes int, lohi *[2]float32, sc *[32]float32, codes *int8) (s float32, err, den float64, best int)
TEXT ·GroupSearch16(SB), NOSPLIT, $0-88
	MOVQ x+0(FP), SI
	MOVQ wd+8(FP), DI
	MOVQ n+16(FP), BX
	MOVQ lanes+24(FP), R10
	MOVQ codes+48(FP), R11
	MOVQ sc+40(FP), R13

	// K6: all sixteen lanes; K7: the lanes of the last chunk, ((n-1) mod 16) + 1 of them.
	KXNORW K6, K6, K6
	LASTMASK(BX)

	// The group's amax, scales and inverses as GroupPrep16 left them.
	VMOVSS 64(R13), X0
	VXORPS X1, X1, X1
	VUCOMISS X1, X0
	JPS outOfRange // NaN
	JEQ zeroGroup
	VUCOMISS minAmax32<>(SB), X0
	JCS outOfRange
	VUCOMISS maxAmax32<>(SB), X0
	JHI outOfRange
	VMOVUPS (R13), Y9
	VXORPS Y10, Y10, Y10
	VBROADCASTSS 32(R13), Z16
	VBROADCASTSS 36(R13), Z17
	VBROADCASTSS 40(R13), Z18
	VBROADCASTSS 44(R13), Z19
	VBROADCASTSS 48(R13), Z20
	VBROADCASTSS 52(R13), Z21
	VBROADCASTSS 56(R13), Z22
	VBROADCASTSS 60(R13), Z23

	VBROADCASTSS sign32<>(SB), Z1
	VBROADCASTSS half32<>(SB), Z2
	MOVQ lohi+32(FP), AX
	VBROADCASTSS (AX), Z6
	VBROADCASTSS 4(AX), Z7
	VPXORD Z0, Z0, Z0
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	LEAQ 15(BX), R12
	SHRQ $4, R12
	KMOVW K6, K5
	CMPQ R10, $1
	JNE searchLoops
	VUCOMISS X9, X10 // one candidate, its scale not 0: one pass (one1)
	JNE one1
	JPS one1

searchLoops:
	TESTQ DI, DI
	JNZ weighted

plain:
	NEXTMASK(plainFull)
	VMOVUPS.Z (SI), K5, Z3
	VMULPS Z3, Z3, Z5
	VADDPS Z5, Z0, Z0
	CAND(Z16, Z24)
	CMPQ R10, $1
	JLE plainNext
	CAND(Z17, Z25)
	CMPQ R10, $2
	JLE plainNext
	CAND(Z18, Z26)
	CMPQ R10, $3
	JLE plainNext
	CAND(Z19, Z27)
	CMPQ R10, $4
	JLE plainNext
	CAND(Z20, Z28)
	CMPQ R10, $5
	JLE plainNext
	CAND(Z21, Z29)
	CMPQ R10, $6
	JLE plainNext
	CAND(Z22, Z30)
	CMPQ R10, $7
	JLE plainNext
	CAND(Z23, Z31)
plainNext:
	ADDQ $64, SI
	DECQ R12
	JNZ plain
	JMP reduce

weighted:
	NEXTMASK(weightedFull)
	VMOVUPS.Z (SI), K5, Z3
	VMOVUPS.Z (DI), K5, Z4
	VMULPS Z3, Z4, Z5
	VMULPS Z3, Z5, Z5
	VADDPS Z5, Z0, Z0
	CANDW(Z16, Z24)
	CMPQ R10, $1
	JLE weightedNext
	CANDW(Z17, Z25)
	CMPQ R10, $2
	JLE weightedNext
	CANDW(Z18, Z26)
	CMPQ R10, $3
	JLE weightedNext
	CANDW(Z19, Z27)
	CMPQ R10, $4
	JLE weightedNext
	CANDW(Z20, Z28)
	CMPQ R10, $5
	JLE weightedNext
	CANDW(Z21, Z29)
	CMPQ R10, $6
	JLE weightedNext
	CANDW(Z22, Z30)
	CMPQ R10, $7
	JLE weightedNext
	CANDW(Z23, Z31)
weightedNext:
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ R12
	JNZ weighted

reduce:
	// E_j = reduce16 of candidate j's lanes, all eight at once: lanes 8 apart (PAIR16), 4 apart
	// (PAIR8), then 2 and 1 apart within each 128-bit chunk. Chunk i ends holding
	// [E_i, E_(i+4), E_i, E_(i+4)]; eidx32 gathers E_0..E_7 into the low eight lanes.
	PAIR16(Z24, Z25)
	PAIR16(Z26, Z27)
	PAIR16(Z28, Z29)
	PAIR16(Z30, Z31)
	PAIR8(Z24, Z26)
	PAIR8(Z28, Z30)
	VSHUFPS $0x44, Z28, Z24, Z10
	VSHUFPS $0xEE, Z28, Z24, Z11
	VADDPS Z11, Z10, Z24
	VSHUFPS $0x88, Z24, Z24, Z10
	VSHUFPS $0xDD, Z24, Z24, Z11
	VADDPS Z11, Z10, Z24
	VMOVDQU eidx32<>(SB), Y10
	VPERMPS Z24, Z10, Z24

	// den = reduce16 of its lanes, then float64.
	REDUCE1(Z0, Y0, X0, Y5, X5)
	VCVTSS2SD X0, X0, X15
	VMOVSD X15, den+72(FP)

	// err_j = (s_j·s_j)·E_j in float64; the choice as chooseScaleErr makes it: among the first
	// lanes candidates with s_j != 0, the first whose error is least and below +Inf.
	VCVTPS2PD Y9, Z12
	VCVTPS2PD Y24, Z13
	VMULPD Z12, Z12, Z14
	VMULPD Z13, Z14, Z14
	MOVQ R10, CX
	MOVL $1, DX
	SHLL CX, DX
	DECL DX
	KMOVW DX, K2
	VPXORQ Z13, Z13, Z13
	VCMPPD $4, Z13, Z12, K2, K1 // NEQ_UQ: s_j != 0
	KMOVW K1, DX
	TESTL DX, DX
	JZ noLane
	VBROADCASTSD infD32<>(SB), Z5
	VCMPPD $0x11, Z5, Z14, K1, K3 // LT_OQ: err_j < +Inf
	KMOVW K3, DX
	TESTL DX, DX
	JZ noChoice
	VMOVAPD Z14, K3, Z5 // the choosable errors, +Inf elsewhere
	VEXTRACTF64X4 $1, Z5, Y8
	VMINPD Y8, Y5, Y8
	VEXTRACTF128 $1, Y8, X12
	VMINPD X12, X8, X12
	VPERMILPD $1, X12, X13
	VMINSD X13, X12, X12
	VBROADCASTSD X12, Z13
	VCMPPD $0, Z13, Z5, K3, K4 // EQ_OQ: the lanes holding the least error
	KMOVW K4, DX
	BSFL DX, DX
	MOVQ DX, best+80(FP)
	VMOVSD X12, err+64(FP)
	VMOVSS (R13)(DX*4), X8
	VMOVSS X8, s+56(FP)

	// The codes of the chosen candidate.
	VBROADCASTSS 32(R13)(DX*4), Z16
	MOVQ x+0(FP), SI
	LEAQ 15(BX), R12
	SHRQ $4, R12
	KMOVW K6, K5
codeLoop:
	NEXTMASK(codeFull)
	VMOVUPS.Z (SI), K5, Z3
	CODE32(Z16)
	VCVTTPS2DQ Z11, Z11
	VPMOVSDB Z11, K5, (R11)
	ADDQ $64, SI
	ADDQ $16, R11
	DECQ R12
	JNZ codeLoop
	VZEROUPPER
	RET

// one1: a grid of one factor with a non-zero scale: one pass writes the codes while it sums the
// error and den (the same lanes, order and tree as the search), then the choice is that factor
// unless its error is not below +Inf.
one1:
	TESTQ DI, DI
	JNZ one1Weighted
one1Plain:
	NEXTMASK(one1PlainFull)
	VMOVUPS.Z (SI), K5, Z3
	VMULPS Z3, Z3, Z5
	VADDPS Z5, Z0, Z0
	CODE32(Z16)
	VCVTTPS2DQ Z11, Z12
	VPMOVSDB Z12, K5, (R11)
	VSUBPS Z11, Z10, Z11
	VMULPS Z11, Z11, Z11
	VADDPS Z11, Z24, Z24
	ADDQ $64, SI
	ADDQ $16, R11
	DECQ R12
	JNZ one1Plain
	JMP one1Reduce
one1Weighted:
	NEXTMASK(one1WeightedFull)
	VMOVUPS.Z (SI), K5, Z3
	VMOVUPS.Z (DI), K5, Z4
	VMULPS Z3, Z4, Z5
	VMULPS Z3, Z5, Z5
	VADDPS Z5, Z0, Z0
	CODE32(Z16)
	VCVTTPS2DQ Z11, Z12
	VPMOVSDB Z12, K5, (R11)
	VSUBPS Z11, Z10, Z11
	VMULPS Z4, Z11, Z12
	VMULPS Z11, Z12, Z12
	VADDPS Z12, Z24, Z24
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $16, R11
	DECQ R12
	JNZ one1Weighted
one1Reduce:
	REDUCE1(Z0, Y0, X0, Y5, X5)
	VCVTSS2SD X0, X0, X15
	VMOVSD X15, den+72(FP)
	REDUCE1(Z24, Y24, X24, Y5, X5)
	VCVTSS2SD X9, X9, X12
	VMULSD X12, X12, X12
	VCVTSS2SD X24, X24, X13
	VMULSD X13, X12, X12
	VUCOMISD infD32<>(SB), X12
	JPS one1NoChoice // NaN
	JCC one1NoChoice // not below +Inf
	VMOVSD X12, err+64(FP)
	VMOVSS X9, s+56(FP)
	MOVQ $0, best+80(FP)
	VZEROUPPER
	RET
one1NoChoice:
	MOVQ codes+48(FP), R11
	MOVL $0, s+56(FP)
	MOVQ $0x7FF0000000000000, AX
	MOVQ AX, err+64(FP)
	MOVQ $-2, best+80(FP)
	JMP zeroCodes

zeroGroup:
	MOVL $0, s+56(FP)
	MOVQ $0, err+64(FP)
	MOVQ $0, den+72(FP)
	MOVQ $-1, best+80(FP)
	JMP zeroCodes

noLane: // no candidate with a non-zero scale: scale 0, err = den
	MOVL $0, s+56(FP)
	VMOVSD X15, err+64(FP)
	MOVQ $-1, best+80(FP)
	JMP zeroCodes

noChoice: // no error below +Inf
	MOVL $0, s+56(FP)
	MOVQ $0x7FF0000000000000, AX
	MOVQ AX, err+64(FP)
	MOVQ $-2, best+80(FP)

zeroCodes:
	VPXORD Z11, Z11, Z11
	LEAQ 15(BX), R12
	SHRQ $4, R12
	KMOVW K6, K5
zeroLoop:
	NEXTMASK(zeroFull)
	VPMOVSDB Z11, K5, (R11)
	ADDQ $16, R11
	DECQ R12
	JNZ zeroLoop
	VZEROUPPER
	RET

outOfRange:
	MOVL $0, s+56(FP)
	MOVQ $0, err+64(FP)
	MOVQ $0, den+72(FP)
	MOVQ $-3, best+80(FP)
	VZEROUPPER
	RET

// PAIRMAX16 and PAIRMAX8 are PAIR16 and PAIR8 with maxima instead of sums.
#define PAIRMAX16(A, B) \
	VSHUFF32X4 $0x44, B, A, Z10; \
	VSHUFF32X4 $0xEE, B, A, Z11; \
	VMAXPS Z11, Z10, A

#define PAIRMAX8(A, B) \
	VSHUFF32X4 $0x88, B, A, Z10; \
	VSHUFF32X4 $0xDD, B, A, Z11; \
	VMAXPS Z11, Z10, A

// REDUCE8ADD leaves in A0's low eight lanes reduce16 of each of A0..A7 (GroupSearch16's reduce);
// REDUCE8MAX their maxima. Z10, Z11 are scratch.
#define REDUCE8ADD(A0, A1, A2, A3, A4, A5, A6, A7) \
	PAIR16(A0, A1); \
	PAIR16(A2, A3); \
	PAIR16(A4, A5); \
	PAIR16(A6, A7); \
	PAIR8(A0, A2); \
	PAIR8(A4, A6); \
	VSHUFPS $0x44, A4, A0, Z10; \
	VSHUFPS $0xEE, A4, A0, Z11; \
	VADDPS Z11, Z10, A0; \
	VSHUFPS $0x88, A0, A0, Z10; \
	VSHUFPS $0xDD, A0, A0, Z11; \
	VADDPS Z11, Z10, A0; \
	VMOVDQU eidx32<>(SB), Y10; \
	VPERMPS A0, Z10, A0

#define REDUCE8MAX(A0, A1, A2, A3, A4, A5, A6, A7) \
	PAIRMAX16(A0, A1); \
	PAIRMAX16(A2, A3); \
	PAIRMAX16(A4, A5); \
	PAIRMAX16(A6, A7); \
	PAIRMAX8(A0, A2); \
	PAIRMAX8(A4, A6); \
	VSHUFPS $0x44, A4, A0, Z10; \
	VSHUFPS $0xEE, A4, A0, Z11; \
	VMAXPS Z11, Z10, A0; \
	VSHUFPS $0x88, A0, A0, Z10; \
	VSHUFPS $0xDD, A0, A0, Z11; \
	VMAXPS Z11, Z10, A0; \
	VMOVDQU eidx32<>(SB), Y10; \
	VPERMPS A0, Z10, A0

// AMAXG takes the lane maxima of |x| over the R10 chunks of sixteen at R8 into ACC (R8 advances).
#define AMAXG(ACC, L) \
	MOVQ R10, CX; \
L: \
	VMOVUPS (R8), Z5; \
	VPANDD Z5, Z4, Z5; \
	VMAXPS Z5, ACC, ACC; \
	ADDQ $64, R8; \
	DECQ CX; \
	JNZ L

// ONEG is GroupSearch16's one1Plain over the R10 chunks at R8 (codes at DX; both advance) with
// inv_J (lane J of Z15): x·x into DEN, d·d into E.
#define ONEG(J, DEN, E, L) \
	MOVL $J, AX; \
	VPBROADCASTD AX, Z12; \
	VPERMPS Z15, Z12, Z0; \
	MOVQ R10, CX; \
L: \
	VMOVUPS (R8), Z3; \
	VMULPS Z3, Z3, Z5; \
	VADDPS Z5, DEN, DEN; \
	CODE32(Z0); \
	VCVTTPS2DQ Z11, Z12; \
	VPMOVSDB Z12, (DX); \
	VSUBPS Z11, Z10, Z11; \
	VMULPS Z11, Z11, Z11; \
	VADDPS Z11, E, E; \
	ADDQ $64, R8; \
	ADDQ $16, DX; \
	DECQ CX; \
	JNZ L

// func RowOne16x8(x *float32, blocks, group int, f, qmax float64, lohi *[2]float32, codes *int8, scales *float32, errs, dens *float64, done *uint8)
//
// GroupPrep16's one-factor arithmetic and GroupSearch16's one-pass path (one1Plain, one1Reduce)
// for blocks of eight whole groups of group values (a multiple of 16), eight groups side by side:
// their amax, scales and inverses in the lanes of one register (the same arithmetic per lane),
// their sums in sixteen registers reduced by GroupSearch16's tree. done gets one byte per block,
// bit j set for the groups written.
TEXT ·RowOne16x8(SB), NOSPLIT, $0-88
	MOVQ x+0(FP), SI
	MOVQ blocks+8(FP), BX
	MOVQ group+16(FP), R10
	SHRQ $4, R10
	VBROADCASTSD f+24(FP), Z8
	VBROADCASTSD qmax+32(FP), Z9
	MOVQ lohi+40(FP), AX
	VBROADCASTSS (AX), Z6
	VBROADCASTSS 4(AX), Z7
	MOVQ codes+48(FP), DX
	MOVQ scales+56(FP), R13
	MOVQ errs+64(FP), R14
	MOVQ dens+72(FP), R15
	MOVQ done+80(FP), DI
	VBROADCASTSS abs32<>(SB), Z4
	VBROADCASTSS sign32<>(SB), Z1
	VBROADCASTSS half32<>(SB), Z2
	VBROADCASTSS one32<>(SB), Z13

rowBlock:
	// The eight groups' amax, side by side.
	MOVQ SI, R8
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	AMAXG(Z16, amax0)
	AMAXG(Z17, amax1)
	AMAXG(Z18, amax2)
	AMAXG(Z19, amax3)
	AMAXG(Z20, amax4)
	AMAXG(Z21, amax5)
	AMAXG(Z22, amax6)
	AMAXG(Z23, amax7)
	REDUCE8MAX(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23)

	// K1: the groups of amax in [2^-40, 2^40] (not NaN, not 0) and s != 0. s = float32(f·amax/qmax)
	// in float64 (Y14), inv = 1/s in float32 (Y15, 0 where s = 0).
	VBROADCASTSS minAmax32<>(SB), Y10
	VBROADCASTSS maxAmax32<>(SB), Y11
	VCMPPS $0x1D, Y10, Y16, K1 // GE_OQ
	VCMPPS $0x12, Y11, Y16, K2 // LE_OQ
	KANDW K2, K1, K1
	VCVTPS2PD Y16, Z14
	VMULPD Z8, Z14, Z14
	VDIVPD Z9, Z14, Z14
	VCVTPD2PS Z14, Y14
	VXORPS Y12, Y12, Y12
	VCMPPS $4, Y12, Y14, K2 // NEQ_UQ
	KANDW K2, K1, K1
	VDIVPS.Z Y14, Y13, K2, Y15

	// Codes, den and E of each group in one pass.
	MOVQ SI, R8
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	ONEG(0, Z16, Z24, one0)
	ONEG(1, Z17, Z25, one1x)
	ONEG(2, Z18, Z26, one2)
	ONEG(3, Z19, Z27, one3)
	ONEG(4, Z20, Z28, one4)
	ONEG(5, Z21, Z29, one5)
	ONEG(6, Z22, Z30, one6)
	ONEG(7, Z23, Z31, one7)
	MOVQ R8, SI
	REDUCE8ADD(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23)
	REDUCE8ADD(Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31)

	// err = (s·s)·E in float64; K1 also needs err below +Inf.
	VCVTPS2PD Y14, Z12
	VMULPD Z12, Z12, Z12
	VCVTPS2PD Y24, Z10
	VMULPD Z10, Z12, Z12
	VBROADCASTSD infD32<>(SB), Z10
	VCMPPD $0x11, Z10, Z12, K3 // LT_OQ
	KANDW K3, K1, K1
	VCVTPS2PD Y16, Z11
	VMOVUPS Y14, (R13)
	VMOVUPD Z12, (R14)
	VMOVUPD Z11, (R15)
	KMOVW K1, AX
	MOVB AX, (DI)
	ADDQ $32, R13
	ADDQ $64, R14
	ADDQ $64, R15
	INCQ DI
	DECQ BX
	JNZ rowBlock
	VZEROUPPER
	RET
