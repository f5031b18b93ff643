#include "textflag.h"

// nn16 and nn64 sum one row of C = A·B as gonum's Sgemm(NoTrans, NoTrans, 1, A, B, 0, C) does: for
// l = 0..k-1 whose a_l is not ±0 (gonum skips those), c += b_l·a_l, each product rounded before the
// add (VMULPS, then VADDPS) with the operands in the order of gonum's AxpyUnitary (MULSS x, then
// ADDSS y: the product first), which decides which of two NaNs' payloads a value keeps. The columns
// live in registers for the whole row; mask selects them (bit j: column j), so B and C are read and
// written only there.

// NNSTEP multiplies row l of B (at DI; the columns of register r masked by kr) by a_l (Z4) and adds
// the product to the register's sums.
#define NNSTEP(off, kr, acc, tmp) \
	VMOVUPS.Z off(DI), kr, tmp; \
	VMULPS Z4, tmp, tmp; \
	VADDPS acc, tmp, acc

// func nn16(a *float32, k int, b *float32, ldb int, c *float32, mask uint64)
TEXT ·nn16(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ k+8(FP), CX
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), R8
	SHLQ $2, R8
	MOVQ c+32(FP), DX
	MOVQ mask+40(FP), AX
	KMOVW AX, K1
	VPXORD Z0, Z0, Z0
	TESTQ CX, CX
	JZ done16

loop16:
	MOVL (SI), BX
	ANDL $0x7fffffff, BX
	JZ skip16
	VBROADCASTSS (SI), Z4
	NNSTEP(0, K1, Z0, Z5)

skip16:
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ loop16

done16:
	VMOVUPS Z0, K1, (DX)
	VZEROUPPER
	RET

// func nn64(a *float32, k int, b *float32, ldb int, c *float32, mask uint64)
TEXT ·nn64(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ k+8(FP), CX
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), R8
	SHLQ $2, R8
	MOVQ c+32(FP), DX
	MOVQ mask+40(FP), AX
	KMOVW AX, K1
	SHRQ $16, AX
	KMOVW AX, K2
	SHRQ $16, AX
	KMOVW AX, K3
	SHRQ $16, AX
	KMOVW AX, K4
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	TESTQ CX, CX
	JZ done64

loop64:
	MOVL (SI), BX
	ANDL $0x7fffffff, BX
	JZ skip64
	VBROADCASTSS (SI), Z4
	NNSTEP(0, K1, Z0, Z5)
	NNSTEP(64, K2, Z1, Z6)
	NNSTEP(128, K3, Z2, Z7)
	NNSTEP(192, K4, Z3, Z8)

skip64:
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ loop64

done64:
	VMOVUPS Z0, K1, (DX)
	VMOVUPS Z1, K2, 64(DX)
	VMOVUPS Z2, K3, 128(DX)
	VMOVUPS Z3, K4, 192(DX)
	VZEROUPPER
	RET

// NNSTEP8 is NNSTEP for the eight columns at off(DI) in YMM registers, a_l in Y4.
#define NNSTEP8(off, acc, tmp) \
	VMOVUPS off(DI), tmp; \
	VMULPS Y4, tmp, tmp; \
	VADDPS acc, tmp, acc

// func nn32(a *float32, k int, b *float32, ldb int, c *float32)
TEXT ·nn32(SB), NOSPLIT, $0-40
	MOVQ a+0(FP), SI
	MOVQ k+8(FP), CX
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), R8
	SHLQ $2, R8
	MOVQ c+32(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	TESTQ CX, CX
	JZ done32

loop32:
	MOVL (SI), BX
	ANDL $0x7fffffff, BX
	JZ skip32
	VBROADCASTSS (SI), Y4
	NNSTEP8(0, Y0, Y5)
	NNSTEP8(32, Y1, Y6)
	NNSTEP8(64, Y2, Y7)
	NNSTEP8(96, Y3, Y8)

skip32:
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ loop32

done32:
	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VZEROUPPER
	RET

// func nn8(a *float32, k int, b *float32, ldb int, c *float32, mask *int32)
TEXT ·nn8(SB), NOSPLIT, $0-48
	MOVQ a+0(FP), SI
	MOVQ k+8(FP), CX
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), R8
	SHLQ $2, R8
	MOVQ c+32(FP), DX
	MOVQ mask+40(FP), AX
	VMOVDQU (AX), Y9
	VXORPS Y0, Y0, Y0
	TESTQ CX, CX
	JZ done8

loop8:
	MOVL (SI), BX
	ANDL $0x7fffffff, BX
	JZ skip8
	VBROADCASTSS (SI), Y4
	VMASKMOVPS (DI), Y9, Y5
	VMULPS Y4, Y5, Y5
	VADDPS Y0, Y5, Y0

skip8:
	ADDQ $4, SI
	ADDQ R8, DI
	DECQ CX
	JNZ loop8

done8:
	VMASKMOVPS Y0, Y9, (DX)
	VZEROUPPER
	RET
