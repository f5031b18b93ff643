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
