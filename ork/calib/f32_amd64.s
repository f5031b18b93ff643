#include "textflag.h"

// func f64ToF32AVX2(dst *byte, src *float64, n int) int
// Converts src to float32 eight values at a time (VCVTPD2PS, rounding to nearest as a Go conversion
// does) and stores them little-endian at dst, while no value of a block of eight converts to an Inf or a
// NaN; at most n values. Returns how many it converted (a multiple of eight).
TEXT ·f64ToF32AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	SHRQ $3, CX
	JZ   done
	MOVL $0x7f800000, DX
	MOVQ DX, X7
	VPBROADCASTD X7, Y7 // eight words 0x7f800000: a float32's exponent bits

loop:
	VCVTPD2PSY  (SI)(AX*8), X0
	VCVTPD2PSY  32(SI)(AX*8), X1
	VINSERTF128 $1, X1, Y0, Y0
	VPAND       Y7, Y0, Y2
	VPCMPEQD    Y7, Y2, Y2 // exponent all ones: Inf or NaN
	VPTEST      Y2, Y2
	JNZ         done
	VMOVUPS     Y0, (DI)(AX*4)
	ADDQ        $8, AX
	DECQ        CX
	JNZ         loop

done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
