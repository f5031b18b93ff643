#include "textflag.h"

// step16: rows [j, j+16) of the head's state, one lane a row; see the package doc for the arithmetic.
// SI = the state's column 0 at lane 0, BX = a column's stride (hd·4 bytes), CX = hd/4 (the loops
// take four columns a pass, one partial sum each), R8 = k, R9 = q, R10 = v + j, R11 = out + j;
// Z20 = decay, Z21 = beta, Z22 = scale (broadcast); Z0-Z3 the partial sums.

// DECAY(off, acc): column i (at DI) times decay, stored, its product with k[i] (at AX+off) added to
// acc.
#define DECAY(off, acc) \
	VMULPS (DI), Z20, Z4; \
	VMOVUPS Z4, (DI); \
	VBROADCASTSS off(AX), Z5; \
	VMULPS Z5, Z4, Z5; \
	VADDPS Z5, acc, acc; \
	ADDQ BX, DI

// UPDATE(off, acc): column i plus k[i]·d (d in Z6), stored, its product with q[i] (at DX+off) added
// to acc.
#define UPDATE(off, acc) \
	VBROADCASTSS off(AX), Z5; \
	VMULPS Z6, Z5, Z5; \
	VADDPS (DI), Z5, Z4; \
	VMOVUPS Z4, (DI); \
	VBROADCASTSS off(DX), Z7; \
	VMULPS Z7, Z4, Z7; \
	VADDPS Z7, acc, acc; \
	ADDQ BX, DI

// ZERO4 clears the four partial sums; SUM4 leaves (s0 + s1) + (s2 + s3) in Z0.
#define ZERO4 \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3

#define SUM4 \
	VADDPS Z1, Z0, Z0; \
	VADDPS Z3, Z2, Z2; \
	VADDPS Z2, Z0, Z0

// func step16(st *float32, hd int, k, q, v *float32, decay, beta, scale float32, out *float32)
TEXT ·step16(SB), NOSPLIT, $0-64
	MOVQ st+0(FP), SI
	MOVQ hd+8(FP), BX
	MOVQ BX, R12
	SHRQ $2, R12
	SHLQ $2, BX
	MOVQ k+16(FP), R8
	MOVQ q+24(FP), R9
	MOVQ v+32(FP), R10
	MOVQ out+56(FP), R11
	VBROADCASTSS decay+40(FP), Z20
	VBROADCASTSS beta+44(FP), Z21
	VBROADCASTSS scale+48(FP), Z22

	// d = (v - S·k)·beta over the decayed state
	ZERO4
	MOVQ SI, DI
	MOVQ R8, AX
	MOVQ R12, CX

decay:
	DECAY(0, Z0)
	DECAY(4, Z1)
	DECAY(8, Z2)
	DECAY(12, Z3)
	ADDQ $16, AX
	DECQ CX
	JNZ decay

	SUM4
	VMOVUPS (R10), Z6
	VSUBPS Z0, Z6, Z6
	VMULPS Z21, Z6, Z6

	// S += k·d, out = (S·q)·scale
	ZERO4
	MOVQ SI, DI
	MOVQ R8, AX
	MOVQ R9, DX
	MOVQ R12, CX

update:
	UPDATE(0, Z0)
	UPDATE(4, Z1)
	UPDATE(8, Z2)
	UPDATE(12, Z3)
	ADDQ $16, AX
	ADDQ $16, DX
	DECQ CX
	JNZ update

	SUM4
	VMULPS Z22, Z0, Z0
	VMOVUPS Z0, (R11)
	VZEROUPPER
	RET

// step8 is step16 in AVX2 registers, rows [j, j+8): Y8 = decay, Y9 = beta, Y10 = scale; Y0-Y3 the
// partial sums.

#define DECAY8(off, acc) \
	VMULPS (DI), Y8, Y4; \
	VMOVUPS Y4, (DI); \
	VBROADCASTSS off(AX), Y5; \
	VMULPS Y5, Y4, Y5; \
	VADDPS Y5, acc, acc; \
	ADDQ BX, DI

#define UPDATE8(off, acc) \
	VBROADCASTSS off(AX), Y5; \
	VMULPS Y6, Y5, Y5; \
	VADDPS (DI), Y5, Y4; \
	VMOVUPS Y4, (DI); \
	VBROADCASTSS off(DX), Y7; \
	VMULPS Y7, Y4, Y7; \
	VADDPS Y7, acc, acc; \
	ADDQ BX, DI

#define ZERO4Y \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3

#define SUM4Y \
	VADDPS Y1, Y0, Y0; \
	VADDPS Y3, Y2, Y2; \
	VADDPS Y2, Y0, Y0

// func step8(st *float32, hd int, k, q, v *float32, decay, beta, scale float32, out *float32)
TEXT ·step8(SB), NOSPLIT, $0-64
	MOVQ st+0(FP), SI
	MOVQ hd+8(FP), BX
	MOVQ BX, R12
	SHRQ $2, R12
	SHLQ $2, BX
	MOVQ k+16(FP), R8
	MOVQ q+24(FP), R9
	MOVQ v+32(FP), R10
	MOVQ out+56(FP), R11
	VBROADCASTSS decay+40(FP), Y8
	VBROADCASTSS beta+44(FP), Y9
	VBROADCASTSS scale+48(FP), Y10

	ZERO4Y
	MOVQ SI, DI
	MOVQ R8, AX
	MOVQ R12, CX

decay8:
	DECAY8(0, Y0)
	DECAY8(4, Y1)
	DECAY8(8, Y2)
	DECAY8(12, Y3)
	ADDQ $16, AX
	DECQ CX
	JNZ decay8

	SUM4Y
	VMOVUPS (R10), Y6
	VSUBPS Y0, Y6, Y6
	VMULPS Y9, Y6, Y6

	ZERO4Y
	MOVQ SI, DI
	MOVQ R8, AX
	MOVQ R9, DX
	MOVQ R12, CX

update8:
	UPDATE8(0, Y0)
	UPDATE8(4, Y1)
	UPDATE8(8, Y2)
	UPDATE8(12, Y3)
	ADDQ $16, AX
	ADDQ $16, DX
	DECQ CX
	JNZ update8

	SUM4Y
	VMULPS Y10, Y0, Y0
	VMOVUPS Y0, (R11)
	VZEROUPPER
	RET
