#include "textflag.h"

// step16: rows [j, j+16) of the head's state, one lane a row; see the package doc for the arithmetic.
// SI = the state's column 0 at lane 0, BX = a column's stride (hd·4 bytes), CX = hd/4 (the loops
// take four columns a pass, one partial sum each), R8 = k, R9 = q, R10 = v + j, R11 = out + j;
// Z20 = decay, Z21 = beta, Z22 = scale (broadcast); Z0-Z3 the partial sums.

// The macros take the registers: zmm for step16, ymm for step8 (the same instructions).

// DECAY(off, acc, dec, t4, t5): column i (at DI) times decay (dec), stored, its product with k[i] (at
// AX+off) added to acc; t4, t5 scratch.
#define DECAY(off, acc, dec, t4, t5) \
	VMULPS (DI), dec, t4; \
	VMOVUPS t4, (DI); \
	VBROADCASTSS off(AX), t5; \
	VMULPS t5, t4, t5; \
	VADDPS t5, acc, acc; \
	ADDQ BX, DI

// UPDATE(off, acc, d, t4, t5, t7): column i plus k[i]·d, stored, its product with q[i] (at DX+off)
// added to acc; t4, t5, t7 scratch.
#define UPDATE(off, acc, d, t4, t5, t7) \
	VBROADCASTSS off(AX), t5; \
	VMULPS d, t5, t5; \
	VADDPS (DI), t5, t4; \
	VMOVUPS t4, (DI); \
	VBROADCASTSS off(DX), t7; \
	VMULPS t7, t4, t7; \
	VADDPS t7, acc, acc; \
	ADDQ BX, DI

// ZERO4 clears the four partial sums with xor (VPXORD for zmm, VXORPS for ymm); SUM4 leaves
// (s0 + s1) + (s2 + s3) in s0.
#define ZERO4(xor, s0, s1, s2, s3) \
	xor s0, s0, s0; \
	xor s1, s1, s1; \
	xor s2, s2, s2; \
	xor s3, s3, s3

#define SUM4(s0, s1, s2, s3) \
	VADDPS s1, s0, s0; \
	VADDPS s3, s2, s2; \
	VADDPS s2, s0, s0

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
	ZERO4(VPXORD, Z0, Z1, Z2, Z3)
	MOVQ SI, DI
	MOVQ R8, AX
	MOVQ R12, CX

decay:
	DECAY(0, Z0, Z20, Z4, Z5)
	DECAY(4, Z1, Z20, Z4, Z5)
	DECAY(8, Z2, Z20, Z4, Z5)
	DECAY(12, Z3, Z20, Z4, Z5)
	ADDQ $16, AX
	DECQ CX
	JNZ decay

	SUM4(Z0, Z1, Z2, Z3)
	VMOVUPS (R10), Z6
	VSUBPS Z0, Z6, Z6
	VMULPS Z21, Z6, Z6

	// S += k·d, out = (S·q)·scale
	ZERO4(VPXORD, Z0, Z1, Z2, Z3)
	MOVQ SI, DI
	MOVQ R8, AX
	MOVQ R9, DX
	MOVQ R12, CX

update:
	UPDATE(0, Z0, Z6, Z4, Z5, Z7)
	UPDATE(4, Z1, Z6, Z4, Z5, Z7)
	UPDATE(8, Z2, Z6, Z4, Z5, Z7)
	UPDATE(12, Z3, Z6, Z4, Z5, Z7)
	ADDQ $16, AX
	ADDQ $16, DX
	DECQ CX
	JNZ update

	SUM4(Z0, Z1, Z2, Z3)
	VMULPS Z22, Z0, Z0
	VMOVUPS Z0, (R11)
	VZEROUPPER
	RET

// step8 is step16 in AVX2 registers, rows [j, j+8): Y8 = decay, Y9 = beta, Y10 = scale; Y0-Y3 the
// partial sums.

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

	ZERO4(VXORPS, Y0, Y1, Y2, Y3)
	MOVQ SI, DI
	MOVQ R8, AX
	MOVQ R12, CX

decay8:
	DECAY(0, Y0, Y8, Y4, Y5)
	DECAY(4, Y1, Y8, Y4, Y5)
	DECAY(8, Y2, Y8, Y4, Y5)
	DECAY(12, Y3, Y8, Y4, Y5)
	ADDQ $16, AX
	DECQ CX
	JNZ decay8

	SUM4(Y0, Y1, Y2, Y3)
	VMOVUPS (R10), Y6
	VSUBPS Y0, Y6, Y6
	VMULPS Y9, Y6, Y6

	ZERO4(VXORPS, Y0, Y1, Y2, Y3)
	MOVQ SI, DI
	MOVQ R8, AX
	MOVQ R9, DX
	MOVQ R12, CX

update8:
	UPDATE(0, Y0, Y6, Y4, Y5, Y7)
	UPDATE(4, Y1, Y6, Y4, Y5, Y7)
	UPDATE(8, Y2, Y6, Y4, Y5, Y7)
	UPDATE(12, Y3, Y6, Y4, Y5, Y7)
	ADDQ $16, AX
	ADDQ $16, DX
	DECQ CX
	JNZ update8

	SUM4(Y0, Y1, Y2, Y3)
	VMULPS Y10, Y0, Y0
	VMOVUPS Y0, (R11)
	VZEROUPPER
	RET
