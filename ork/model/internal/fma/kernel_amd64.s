#include "textflag.h"

// func lanes8(w, x *float32, n int, acc *[8]float32)
//
// acc = w·x + acc lane by lane, eight values a step, one rounding each (VFMADD231PS), in order (each
// lane's sum is one chain).
TEXT ·lanes8(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ acc+24(FP), DX
	VMOVUPS (DX), Y0
	SHRQ $3, CX

loop:
	VMOVUPS (SI), Y1
	VFMADD231PS (DI), Y1, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop

	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET

// func dot8(w, x *float32, n int) float32
//
// lanes8 from a zero accumulator, then hsum_float_8 in registers: the high half added to the low
// (VEXTRACTF128, VADDPS: lane i = v[i+4] + v[i]), lanes 2 and 3 onto 0 and 1 (VMOVHLPS, VADDPS), lane
// 1 onto 0 (VMOVSHDUP, VADDSS).
TEXT ·dot8(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	SHRQ $3, CX

loopdot8:
	VMOVUPS (SI), Y1
	VFMADD231PS (DI), Y1, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loopdot8

	VEXTRACTF128 $1, Y0, X1
	VADDPS X0, X1, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func lanes32(w, x *float32, n int, acc *[4][8]float32)
//
// lanes8 for four accumulators, the values of each block of 32 eight to an accumulator in order.
TEXT ·lanes32(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	MOVQ acc+24(FP), DX
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y1
	VMOVUPS 64(DX), Y2
	VMOVUPS 96(DX), Y3
	SHRQ $5, CX

loop32:
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	DECQ CX
	JNZ loop32

	VMOVUPS Y0, (DX)
	VMOVUPS Y1, 32(DX)
	VMOVUPS Y2, 64(DX)
	VMOVUPS Y3, 96(DX)
	VZEROUPPER
	RET

// func q8Lanes(wq, xq *int8, wd, xd *float32, n int, acc *[8]float32)
//
// Per block: the 32 codes of w and x widened to int16 (VPMOVSXBW), multiplied and summed in pairs
// (VPMADDWD: pair k = codes 2k, 2k+1, exact), adjacent pairs summed (VPHADDD, then VPERMQ to put
// lane j = codes 4j..4j+3 in order), converted to float32 (exact), and acc = d·s + acc with d =
// wd·xd rounded to float32 (VMULSS) broadcast (VFMADD231PS).
TEXT ·q8Lanes(SB), NOSPLIT, $0-48
	MOVQ wq+0(FP), SI
	MOVQ xq+8(FP), DI
	MOVQ wd+16(FP), R8
	MOVQ xd+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ acc+40(FP), DX
	VMOVUPS (DX), Y0

loopq8:
	VPMOVSXBW (SI), Y1
	VPMOVSXBW (DI), Y2
	VPMADDWD Y2, Y1, Y1
	VPMOVSXBW 16(SI), Y3
	VPMOVSXBW 16(DI), Y4
	VPMADDWD Y4, Y3, Y3
	VPHADDD Y3, Y1, Y1
	VPERMQ $0xD8, Y1, Y1
	VCVTDQ2PS Y1, Y1
	VMOVSS (R8), X5
	VMULSS (R9), X5, X5
	VBROADCASTSS X5, Y5
	VFMADD231PS Y1, Y5, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JNZ loopq8

	VMOVUPS Y0, (DX)
	VZEROUPPER
	RET

// func axpyRows(acc, v *float32, w, stride int, p *float32, n int)
//
// acc[j] = v[c·stride+j]·p[c] + acc[j] for c = 0..n-1 in order, one rounding each (VFMADD231PS with
// p[c] broadcast): the columns in blocks of 64 (eight accumulators, the rows' FMAs independent of one
// another), then eights.
TEXT ·axpyRows(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ w+16(FP), R8
	MOVQ stride+24(FP), R9
	SHLQ $2, R9
	MOVQ p+32(FP), R10
	MOVQ n+40(FP), R11

block64:
	CMPQ R8, $64
	JLT  block8
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VMOVUPS 128(SI), Y4
	VMOVUPS 160(SI), Y5
	VMOVUPS 192(SI), Y6
	VMOVUPS 224(SI), Y7
	MOVQ DI, AX
	MOVQ R10, BX
	MOVQ R11, CX

rows64:
	VBROADCASTSS (BX), Y8
	VFMADD231PS (AX), Y8, Y0
	VFMADD231PS 32(AX), Y8, Y1
	VFMADD231PS 64(AX), Y8, Y2
	VFMADD231PS 96(AX), Y8, Y3
	VFMADD231PS 128(AX), Y8, Y4
	VFMADD231PS 160(AX), Y8, Y5
	VFMADD231PS 192(AX), Y8, Y6
	VFMADD231PS 224(AX), Y8, Y7
	ADDQ R9, AX
	ADDQ $4, BX
	DECQ CX
	JNZ  rows64

	VMOVUPS Y0, (SI)
	VMOVUPS Y1, 32(SI)
	VMOVUPS Y2, 64(SI)
	VMOVUPS Y3, 96(SI)
	VMOVUPS Y4, 128(SI)
	VMOVUPS Y5, 160(SI)
	VMOVUPS Y6, 192(SI)
	VMOVUPS Y7, 224(SI)
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $64, R8
	JMP  block64

block8:
	TESTQ R8, R8
	JZ    rowsdone
	VMOVUPS (SI), Y0
	MOVQ DI, AX
	MOVQ R10, BX
	MOVQ R11, CX

rows8:
	VBROADCASTSS (BX), Y8
	VFMADD231PS (AX), Y8, Y0
	ADDQ R9, AX
	ADDQ $4, BX
	DECQ CX
	JNZ  rows8

	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, R8
	JMP  block8

rowsdone:
	VZEROUPPER
	RET

// func scale(x *float32, n int, s float32)
//
// x = x·s (VMULPS, s broadcast), eight a step.
TEXT ·scale(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y8
	SHRQ $3, CX

loopscale:
	VMULPS (SI), Y8, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	DECQ CX
	JNZ  loopscale

	VZEROUPPER
	RET

// func round16(x *float32, n int)
//
// Each value to binary16 and back (VCVTPS2PH with immediate 0: round to nearest, ties to even,
// whatever MXCSR says), eight a step.
TEXT ·round16(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $3, CX

loopr16:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, X0
	VCVTPH2PS X0, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	DECQ CX
	JNZ  loopr16

	VZEROUPPER
	RET

// func axpyRound16(acc, v *float32, n int, p float32)
//
// acc = v·p + acc (VFMADD231PS, p broadcast), then to binary16 and back, eight a step.
TEXT ·axpyRound16(SB), NOSPLIT, $0-28
	MOVQ acc+0(FP), SI
	MOVQ v+8(FP), DI
	MOVQ n+16(FP), CX
	VBROADCASTSS p+24(FP), Y8
	SHRQ $3, CX

loopa16:
	VMOVUPS (SI), Y0
	VFMADD231PS (DI), Y8, Y0
	VCVTPS2PH $0, Y0, X0
	VCVTPH2PS X0, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  loopa16

	VZEROUPPER
	RET

// func scaleRound16(x *float32, n int, s float32)
//
// x = x·s (VMULPS, s broadcast), then to binary16 and back, eight a step.
TEXT ·scaleRound16(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y8
	SHRQ $3, CX

loops16:
	VMULPS (SI), Y8, Y0
	VCVTPS2PH $0, Y0, X0
	VCVTPH2PS X0, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	DECQ CX
	JNZ  loops16

	VZEROUPPER
	RET

// ggml_v_expf's constants (vec.h, the AVX2 + FMA build), each in all eight lanes: 0x1.8p23, log2(e),
// ln(2) high and low, the polynomial's five coefficients, 1, 126, 192, the absolute-value mask, and
// the scale factors' bits 0x82000000 and 0x7f000000.
DATA expc<>+0(SB)/4, $0x4b400000
DATA expc<>+4(SB)/4, $0x4b400000
DATA expc<>+8(SB)/4, $0x4b400000
DATA expc<>+12(SB)/4, $0x4b400000
DATA expc<>+16(SB)/4, $0x4b400000
DATA expc<>+20(SB)/4, $0x4b400000
DATA expc<>+24(SB)/4, $0x4b400000
DATA expc<>+28(SB)/4, $0x4b400000
DATA expc<>+32(SB)/4, $0x3fb8aa3b
DATA expc<>+36(SB)/4, $0x3fb8aa3b
DATA expc<>+40(SB)/4, $0x3fb8aa3b
DATA expc<>+44(SB)/4, $0x3fb8aa3b
DATA expc<>+48(SB)/4, $0x3fb8aa3b
DATA expc<>+52(SB)/4, $0x3fb8aa3b
DATA expc<>+56(SB)/4, $0x3fb8aa3b
DATA expc<>+60(SB)/4, $0x3fb8aa3b
DATA expc<>+64(SB)/4, $0x3f317200
DATA expc<>+68(SB)/4, $0x3f317200
DATA expc<>+72(SB)/4, $0x3f317200
DATA expc<>+76(SB)/4, $0x3f317200
DATA expc<>+80(SB)/4, $0x3f317200
DATA expc<>+84(SB)/4, $0x3f317200
DATA expc<>+88(SB)/4, $0x3f317200
DATA expc<>+92(SB)/4, $0x3f317200
DATA expc<>+96(SB)/4, $0x35bfbe8e
DATA expc<>+100(SB)/4, $0x35bfbe8e
DATA expc<>+104(SB)/4, $0x35bfbe8e
DATA expc<>+108(SB)/4, $0x35bfbe8e
DATA expc<>+112(SB)/4, $0x35bfbe8e
DATA expc<>+116(SB)/4, $0x35bfbe8e
DATA expc<>+120(SB)/4, $0x35bfbe8e
DATA expc<>+124(SB)/4, $0x35bfbe8e
DATA expc<>+128(SB)/4, $0x3c072010
DATA expc<>+132(SB)/4, $0x3c072010
DATA expc<>+136(SB)/4, $0x3c072010
DATA expc<>+140(SB)/4, $0x3c072010
DATA expc<>+144(SB)/4, $0x3c072010
DATA expc<>+148(SB)/4, $0x3c072010
DATA expc<>+152(SB)/4, $0x3c072010
DATA expc<>+156(SB)/4, $0x3c072010
DATA expc<>+160(SB)/4, $0x3d2b9f17
DATA expc<>+164(SB)/4, $0x3d2b9f17
DATA expc<>+168(SB)/4, $0x3d2b9f17
DATA expc<>+172(SB)/4, $0x3d2b9f17
DATA expc<>+176(SB)/4, $0x3d2b9f17
DATA expc<>+180(SB)/4, $0x3d2b9f17
DATA expc<>+184(SB)/4, $0x3d2b9f17
DATA expc<>+188(SB)/4, $0x3d2b9f17
DATA expc<>+192(SB)/4, $0x3e2aaf33
DATA expc<>+196(SB)/4, $0x3e2aaf33
DATA expc<>+200(SB)/4, $0x3e2aaf33
DATA expc<>+204(SB)/4, $0x3e2aaf33
DATA expc<>+208(SB)/4, $0x3e2aaf33
DATA expc<>+212(SB)/4, $0x3e2aaf33
DATA expc<>+216(SB)/4, $0x3e2aaf33
DATA expc<>+220(SB)/4, $0x3e2aaf33
DATA expc<>+224(SB)/4, $0x3efffedb
DATA expc<>+228(SB)/4, $0x3efffedb
DATA expc<>+232(SB)/4, $0x3efffedb
DATA expc<>+236(SB)/4, $0x3efffedb
DATA expc<>+240(SB)/4, $0x3efffedb
DATA expc<>+244(SB)/4, $0x3efffedb
DATA expc<>+248(SB)/4, $0x3efffedb
DATA expc<>+252(SB)/4, $0x3efffedb
DATA expc<>+256(SB)/4, $0x3f7ffff6
DATA expc<>+260(SB)/4, $0x3f7ffff6
DATA expc<>+264(SB)/4, $0x3f7ffff6
DATA expc<>+268(SB)/4, $0x3f7ffff6
DATA expc<>+272(SB)/4, $0x3f7ffff6
DATA expc<>+276(SB)/4, $0x3f7ffff6
DATA expc<>+280(SB)/4, $0x3f7ffff6
DATA expc<>+284(SB)/4, $0x3f7ffff6
DATA expc<>+288(SB)/4, $0x3f800000
DATA expc<>+292(SB)/4, $0x3f800000
DATA expc<>+296(SB)/4, $0x3f800000
DATA expc<>+300(SB)/4, $0x3f800000
DATA expc<>+304(SB)/4, $0x3f800000
DATA expc<>+308(SB)/4, $0x3f800000
DATA expc<>+312(SB)/4, $0x3f800000
DATA expc<>+316(SB)/4, $0x3f800000
DATA expc<>+320(SB)/4, $0x42fc0000
DATA expc<>+324(SB)/4, $0x42fc0000
DATA expc<>+328(SB)/4, $0x42fc0000
DATA expc<>+332(SB)/4, $0x42fc0000
DATA expc<>+336(SB)/4, $0x42fc0000
DATA expc<>+340(SB)/4, $0x42fc0000
DATA expc<>+344(SB)/4, $0x42fc0000
DATA expc<>+348(SB)/4, $0x42fc0000
DATA expc<>+352(SB)/4, $0x43400000
DATA expc<>+356(SB)/4, $0x43400000
DATA expc<>+360(SB)/4, $0x43400000
DATA expc<>+364(SB)/4, $0x43400000
DATA expc<>+368(SB)/4, $0x43400000
DATA expc<>+372(SB)/4, $0x43400000
DATA expc<>+376(SB)/4, $0x43400000
DATA expc<>+380(SB)/4, $0x43400000
DATA expc<>+384(SB)/4, $0x7fffffff
DATA expc<>+388(SB)/4, $0x7fffffff
DATA expc<>+392(SB)/4, $0x7fffffff
DATA expc<>+396(SB)/4, $0x7fffffff
DATA expc<>+400(SB)/4, $0x7fffffff
DATA expc<>+404(SB)/4, $0x7fffffff
DATA expc<>+408(SB)/4, $0x7fffffff
DATA expc<>+412(SB)/4, $0x7fffffff
DATA expc<>+416(SB)/4, $0x82000000
DATA expc<>+420(SB)/4, $0x82000000
DATA expc<>+424(SB)/4, $0x82000000
DATA expc<>+428(SB)/4, $0x82000000
DATA expc<>+432(SB)/4, $0x82000000
DATA expc<>+436(SB)/4, $0x82000000
DATA expc<>+440(SB)/4, $0x82000000
DATA expc<>+444(SB)/4, $0x82000000
DATA expc<>+448(SB)/4, $0x7f000000
DATA expc<>+452(SB)/4, $0x7f000000
DATA expc<>+456(SB)/4, $0x7f000000
DATA expc<>+460(SB)/4, $0x7f000000
DATA expc<>+464(SB)/4, $0x7f000000
DATA expc<>+468(SB)/4, $0x7f000000
DATA expc<>+472(SB)/4, $0x7f000000
DATA expc<>+476(SB)/4, $0x7f000000
GLOBL expc<>(SB), RODATA|NOPTR, $480

// func silu(y, x, gate *float32, n int)
//
// y = x/(1 + expf(0 − x)) eight a step (ggml_v_silu), times gate when it is not nil (ggml_vec_swiglu_f32),
// expf being ggml_v_expf operation for operation: z = x·log2e + 0x1.8p23 (FMA), n = z − 0x1.8p23,
// b = x − n·ln2hi − n·ln2lo (two FNMAs), k = 2^n from z's bits, the polynomial j in b (FMAs in
// ggml's order), and k + j·k, or for |n| > 126 the two-factor scaling, for |n| > 192 its square
// (blends where ggml masks: the same bits).
TEXT ·silu(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gate+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	VXORPS Y14, Y14, Y14
	VMOVUPS expc<>+0(SB), Y15

loopsilu:
	VMOVUPS (SI), Y0
	VSUBPS Y0, Y14, Y1
	VMOVAPS Y15, Y2
	VFMADD231PS expc<>+32(SB), Y1, Y2
	VSUBPS Y15, Y2, Y3
	VMOVAPS Y1, Y4
	VFNMADD231PS expc<>+64(SB), Y3, Y4
	VFNMADD231PS expc<>+96(SB), Y3, Y4
	VPSLLD $23, Y2, Y5
	VPADDD expc<>+288(SB), Y5, Y6
	VANDPS expc<>+384(SB), Y3, Y7
	VCMPPS $0x1e, expc<>+320(SB), Y7, Y8
	VMULPS Y4, Y4, Y9
	VMOVUPS expc<>+160(SB), Y10
	VFMADD231PS expc<>+128(SB), Y4, Y10
	VMOVUPS expc<>+224(SB), Y11
	VFMADD231PS expc<>+192(SB), Y4, Y11
	VFMADD231PS Y9, Y10, Y11
	VMULPS expc<>+256(SB), Y4, Y12
	VFMADD231PS Y9, Y11, Y12
	VMOVAPS Y6, Y13
	VFMADD231PS Y6, Y12, Y13
	VMOVMSKPS Y8, AX
	TESTL AX, AX
	JZ    silunormal
	VCMPPS $0x1e, expc<>+352(SB), Y7, Y9
	VCMPPS $0x12, Y14, Y3, Y10
	VANDPS expc<>+416(SB), Y10, Y10
	VPADDD expc<>+448(SB), Y10, Y11
	VPSUBD Y10, Y5, Y10
	VMOVAPS Y10, Y4
	VFMADD231PS Y12, Y10, Y4
	VMULPS Y11, Y4, Y4
	VMULPS Y11, Y11, Y11
	VBLENDVPS Y8, Y4, Y13, Y13
	VBLENDVPS Y9, Y11, Y13, Y13

silunormal:
	VADDPS expc<>+288(SB), Y13, Y13
	VDIVPS Y13, Y0, Y0
	TESTQ DX, DX
	JZ    silustore
	VMULPS (DX), Y0, Y0
	ADDQ  $32, DX

silustore:
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  loopsilu

	VZEROUPPER
	RET

// Q8TOKEN is one token's step of q8Lanes4 for the block whose w codes are widened in Y1 and Y2: its
// codes at x, its scale at d, its accumulator acc (Y3, Y4, X5/Y5 scratch).
#define Q8TOKEN(x, d, acc) \
	VPMADDWD (x), Y1, Y3; \
	VPMADDWD 32(x), Y2, Y4; \
	VPHADDD Y4, Y3, Y3; \
	VPERMQ $0xD8, Y3, Y3; \
	VCVTDQ2PS Y3, Y3; \
	VMOVSS (R8), X5; \
	VMULSS (d), X5, X5; \
	VBROADCASTSS X5, Y5; \
	VFMADD231PS Y3, Y5, acc

// func q8Lanes4(wq *int8, wd *float32, x0, x1, x2, x3 *int16, d0, d1, d2, d3 *float32, n int, acc *[4][8]float32)
//
// q8Lanes for four inputs whose codes are int16 already: per block the 32 codes of w widened once
// (VPMOVSXBW), then for each input the pairs' products summed (VPMADDWD with the input's codes in
// memory), adjacent pairs summed and put in ggml's lane order (VPHADDD, VPERMQ), converted, and
// acc[t] = d·s + acc[t] with d = wd·d_t rounded to float32: q8Lanes's operations.
TEXT ·q8Lanes4(SB), NOSPLIT, $0-96
	MOVQ wq+0(FP), SI
	MOVQ wd+8(FP), R8
	MOVQ x0+16(FP), DI
	MOVQ x1+24(FP), R9
	MOVQ x2+32(FP), R10
	MOVQ x3+40(FP), R11
	MOVQ d0+48(FP), R12
	MOVQ d1+56(FP), R13
	MOVQ d2+64(FP), AX
	MOVQ d3+72(FP), BX
	MOVQ n+80(FP), CX
	MOVQ acc+88(FP), DX
	VMOVUPS (DX), Y0
	VMOVUPS 32(DX), Y6
	VMOVUPS 64(DX), Y7
	VMOVUPS 96(DX), Y8

loopq84:
	VPMOVSXBW (SI), Y1
	VPMOVSXBW 16(SI), Y2
	Q8TOKEN(DI, R12, Y0)
	Q8TOKEN(R9, R13, Y6)
	Q8TOKEN(R10, AX, Y7)
	Q8TOKEN(R11, BX, Y8)
	ADDQ $32, SI
	ADDQ $4, R8
	ADDQ $64, DI
	ADDQ $64, R9
	ADDQ $64, R10
	ADDQ $64, R11
	ADDQ $4, R12
	ADDQ $4, R13
	ADDQ $4, AX
	ADDQ $4, BX
	DECQ CX
	JNZ  loopq84

	VMOVUPS Y0, (DX)
	VMOVUPS Y6, 32(DX)
	VMOVUPS Y7, 64(DX)
	VMOVUPS Y8, 96(DX)
	VZEROUPPER
	RET
