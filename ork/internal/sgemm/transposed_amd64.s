#include "textflag.h"

// dotT16 sums one row of A against sixteen rows of B packed transposed (packT16: a value of each of
// the sixteen rows a lane), each output as DotUnitary sums it (sgemm.go's package doc), one output a
// lane: lane l of register r holds DotUnitary's lane r for output l, so every output's lanes take
// the same products in the same order. The plan (tr, n16, n4, n1) is DotUnitary's for the rows'
// common alignment: tr products into lane 0 before the 16-byte boundary, n16 sixteens into lanes
// 0-3 (Z0-Z3) and 4-7 (Z4-Z7), those folded into 0-3, n4 fours into 0-3, n1 products into lane 0;
// then (l0+l1)+(l2+l3) and the sums + C's values. Products are rounded before they are added, A's
// value first; a sum is added to as acc + product (DotUnitary's ADDPS X, SUM).

// PRODT adds a(aoff) × the packed values at DI+boff to acc.
#define PRODT(aoff, boff, acc) \
	VBROADCASTSS aoff(SI), Z8; \
	VMULPS boff(DI), Z8, Z8; \
	VADDPS Z8, acc, acc

// func dotT16(a *float32, pb *float32, c *float32, tr, n16, n4, n1 int)
TEXT ·dotT16(SB), NOSPLIT, $0-56
	MOVQ a+0(FP), SI
	MOVQ pb+8(FP), DI
	MOVQ c+16(FP), DX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ tr+24(FP), CX
	TESTQ CX, CX
	JZ sixteens

trim:
	PRODT(0, 0, Z0)
	ADDQ $4, SI
	ADDQ $64, DI
	DECQ CX
	JNZ trim

sixteens:
	MOVQ n16+32(FP), CX
	TESTQ CX, CX
	JZ fours

loop16:
	PRODT(0, 0, Z0)
	PRODT(4, 64, Z1)
	PRODT(8, 128, Z2)
	PRODT(12, 192, Z3)
	PRODT(16, 256, Z4)
	PRODT(20, 320, Z5)
	PRODT(24, 384, Z6)
	PRODT(28, 448, Z7)
	PRODT(32, 512, Z0)
	PRODT(36, 576, Z1)
	PRODT(40, 640, Z2)
	PRODT(44, 704, Z3)
	PRODT(48, 768, Z4)
	PRODT(52, 832, Z5)
	PRODT(56, 896, Z6)
	PRODT(60, 960, Z7)
	ADDQ $64, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ loop16
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3

fours:
	MOVQ n4+40(FP), CX
	TESTQ CX, CX
	JZ ones

loop4:
	PRODT(0, 0, Z0)
	PRODT(4, 64, Z1)
	PRODT(8, 128, Z2)
	PRODT(12, 192, Z3)
	ADDQ $16, SI
	ADDQ $256, DI
	DECQ CX
	JNZ loop4

ones:
	MOVQ n1+48(FP), CX
	TESTQ CX, CX
	JZ fold

loop1:
	PRODT(0, 0, Z0)
	ADDQ $4, SI
	ADDQ $64, DI
	DECQ CX
	JNZ loop1

fold:
	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z2, Z0, Z0
	VADDPS (DX), Z0, Z0
	VMOVUPS Z0, (DX)
	VZEROUPPER
	RET

// dotT8 is dotT16 in AVX2 registers: eight rows of B packed transposed (packT8), one output a lane
// of a YMM register, the same plan and the same sums in the same order.

// PRODT8 adds a(aoff) × the packed values at DI+boff to acc.
#define PRODT8(aoff, boff, acc) \
	VBROADCASTSS aoff(SI), Y8; \
	VMULPS boff(DI), Y8, Y8; \
	VADDPS Y8, acc, acc

// func dotT8(a *float32, pb *float32, c *float32, tr, n16, n4, n1 int)
TEXT ·dotT8(SB), NOSPLIT, $0-56
	MOVQ a+0(FP), SI
	MOVQ pb+8(FP), DI
	MOVQ c+16(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ tr+24(FP), CX
	TESTQ CX, CX
	JZ sixteens8

trim8:
	PRODT8(0, 0, Y0)
	ADDQ $4, SI
	ADDQ $32, DI
	DECQ CX
	JNZ trim8

sixteens8:
	MOVQ n16+32(FP), CX
	TESTQ CX, CX
	JZ fours8

loop16x8:
	PRODT8(0, 0, Y0)
	PRODT8(4, 32, Y1)
	PRODT8(8, 64, Y2)
	PRODT8(12, 96, Y3)
	PRODT8(16, 128, Y4)
	PRODT8(20, 160, Y5)
	PRODT8(24, 192, Y6)
	PRODT8(28, 224, Y7)
	PRODT8(32, 256, Y0)
	PRODT8(36, 288, Y1)
	PRODT8(40, 320, Y2)
	PRODT8(44, 352, Y3)
	PRODT8(48, 384, Y4)
	PRODT8(52, 416, Y5)
	PRODT8(56, 448, Y6)
	PRODT8(60, 480, Y7)
	ADDQ $64, SI
	ADDQ $512, DI
	DECQ CX
	JNZ loop16x8
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3

fours8:
	MOVQ n4+40(FP), CX
	TESTQ CX, CX
	JZ ones8

loop4x8:
	PRODT8(0, 0, Y0)
	PRODT8(4, 32, Y1)
	PRODT8(8, 64, Y2)
	PRODT8(12, 96, Y3)
	ADDQ $16, SI
	ADDQ $128, DI
	DECQ CX
	JNZ loop4x8

ones8:
	MOVQ n1+48(FP), CX
	TESTQ CX, CX
	JZ fold8

loop1x8:
	PRODT8(0, 0, Y0)
	ADDQ $4, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop1x8

fold8:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VADDPS (DX), Y0, Y0
	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET
