#include "textflag.h"

// func f16ToF32F16C(dst *float32, src *byte, n int) int
TEXT ·f16ToF32F16C(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	SHRQ $3, CX
	JZ   done
	MOVL $0x7c007c00, DX
	MOVQ DX, X2
	VPBROADCASTD X2, X2 // eight words 0x7c00: a half's exponent bits

loop:
	VMOVDQU   (SI)(AX*2), X0
	VPAND     X2, X0, X1
	VPCMPEQW  X2, X1, X1 // exponent all ones: Inf or NaN (VCVTPH2PS would quiet a signalling NaN)
	VPTEST    X1, X1
	JNZ       done
	VCVTPH2PS X0, Y3
	VMOVUPS   Y3, (DI)(AX*4)
	ADDQ      $8, AX
	DECQ      CX
	JNZ       loop

done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
