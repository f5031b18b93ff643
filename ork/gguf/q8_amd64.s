#include "textflag.h"

// func dequantQ8_0AVX2(dst *float32, src *byte, nb int, tab *float32)
// Per block of 34 bytes: d = tab[the little-endian half at src], then dst[j] = d · float32(int8(src[2+j]))
// for j in [0, 32): VPMOVSXBD widens eight codes to int32, VCVTDQ2PS converts them exactly, VMULPS rounds
// each product once, as the Go loop's float32 multiply does.
TEXT ·dequantQ8_0AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVQ tab+24(FP), DX
	TESTQ CX, CX
	JZ   done

loop:
	MOVWLZX      (SI), AX
	VBROADCASTSS (DX)(AX*4), Y0
	VPMOVSXBD    2(SI), Y1
	VPMOVSXBD    10(SI), Y2
	VPMOVSXBD    18(SI), Y3
	VPMOVSXBD    26(SI), Y4
	VCVTDQ2PS    Y1, Y1
	VCVTDQ2PS    Y2, Y2
	VCVTDQ2PS    Y3, Y3
	VCVTDQ2PS    Y4, Y4
	VMULPS       Y1, Y0, Y1
	VMULPS       Y2, Y0, Y2
	VMULPS       Y3, Y0, Y3
	VMULPS       Y4, Y0, Y4
	VMOVUPS      Y1, (DI)
	VMOVUPS      Y2, 32(DI)
	VMOVUPS      Y3, 64(DI)
	VMOVUPS      Y4, 96(DI)
	ADDQ         $34, SI
	ADDQ         $128, DI
	DECQ         CX
	JNZ          loop

done:
	VZEROUPPER
	RET
