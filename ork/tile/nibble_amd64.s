#include "textflag.h"

// SSE2 (every amd64 CPU has it): one run of 32 int4 codes <-> 16 bytes, exactly as packRunGo and
// unpackRunGo.

DATA lowNib<>+0(SB)/8, $0x0F0F0F0F0F0F0F0F
DATA lowNib<>+8(SB)/8, $0x0F0F0F0F0F0F0F0F
GLOBL lowNib<>(SB), RODATA|NOPTR, $16

DATA highNib<>+0(SB)/8, $0xF0F0F0F0F0F0F0F0
DATA highNib<>+8(SB)/8, $0xF0F0F0F0F0F0F0F0
GLOBL highNib<>(SB), RODATA|NOPTR, $16

DATA eights<>+0(SB)/8, $0x0808080808080808
DATA eights<>+8(SB)/8, $0x0808080808080808
GLOBL eights<>(SB), RODATA|NOPTR, $16

DATA lowBytes<>+0(SB)/8, $0x00FF00FF00FF00FF
DATA lowBytes<>+8(SB)/8, $0x00FF00FF00FF00FF
GLOBL lowBytes<>(SB), RODATA|NOPTR, $16

// func unpackRunSSE2(run *int8, in *byte, highFirst bool)
TEXT ·unpackRunSSE2(SB), NOSPLIT, $0-17
	MOVQ  run+0(FP), DI
	MOVQ  in+8(FP), SI
	MOVOU lowNib<>(SB), X14
	MOVOU eights<>(SB), X15
	MOVOU (SI), X0
	MOVOU X0, X1
	PSRLW $4, X1
	PAND  X14, X0 // bits 0..3 of each byte
	PAND  X14, X1 // bits 4..7 of each byte
	PXOR  X15, X0 // sign-extend a nibble v: (v ^ 8) - 8, byte by byte
	PSUBB X15, X0
	PXOR  X15, X1
	PSUBB X15, X1
	MOVB  highFirst+16(FP), AX
	TESTB AL, AL
	JZ    lowFirst
	MOVOU X1, X2 // high nibble first: swap
	MOVOU X0, X1
	MOVOU X2, X0

lowFirst:
	MOVOU     X0, X2
	PUNPCKLBW X1, X2 // first[0], second[0], first[1], second[1], ... for bytes 0..7
	PUNPCKHBW X1, X0 // for bytes 8..15
	MOVOU     X2, 0(DI)
	MOVOU     X0, 16(DI)
	RET

// func packRunSSE2(out *byte, run *int8, highFirst bool) (outOfRange bool)
TEXT ·packRunSSE2(SB), NOSPLIT, $0-25
	MOVQ     out+0(FP), DI
	MOVQ     run+8(FP), SI
	MOVOU    lowBytes<>(SB), X13
	MOVOU    lowNib<>(SB), X14
	MOVOU    eights<>(SB), X15
	MOVOU    0(SI), X0  // codes 0..15
	MOVOU    16(SI), X1 // codes 16..31
	// Out of range: some (code + 8) byte above 15 (codes are -8..7 exactly when every one is 0..15).
	MOVOU    X0, X4
	PADDB    X15, X4
	MOVOU    X1, X5
	PADDB    X15, X5
	POR      X5, X4
	MOVOU    highNib<>(SB), X6
	PAND     X6, X4
	PXOR     X7, X7
	PCMPEQB  X7, X4
	PMOVMSKB X4, AX
	XORL     $0xFFFF, AX
	SETNE    outOfRange+24(FP)
	// The even-indexed codes (a) and the odd-indexed (b), sixteen each.
	MOVOU    X0, X2
	PAND     X13, X2
	MOVOU    X1, X3
	PAND     X13, X3
	PACKUSWB X3, X2 // a
	PSRLW    $8, X0
	PSRLW    $8, X1
	PACKUSWB X1, X0 // b
	MOVB     highFirst+16(FP), AX
	TESTB    AL, AL
	JZ       packLow
	MOVOU    X2, X3 // high nibble first: a goes high
	MOVOU    X0, X2
	MOVOU    X3, X0

packLow:
	PAND  X14, X2 // low nibble
	PSLLW $4, X0
	PAND  X6, X0  // high nibble
	POR   X2, X0
	MOVOU X0, 0(DI)
	RET

// func packRunsSSE2(out *byte, stride int, runs *int8, count int, highFirst bool) (outOfRange bool)
// packRunSSE2 of count (positive) consecutive runs at runs, the i-th written at out + i·stride;
// outOfRange says whether any run had a code outside -8..7.
TEXT ·packRunsSSE2(SB), NOSPLIT, $0-41
	MOVQ     out+0(FP), DI
	MOVQ     stride+8(FP), R8
	MOVQ     runs+16(FP), SI
	MOVQ     count+24(FP), CX
	MOVB     highFirst+32(FP), DX
	MOVOU    lowBytes<>(SB), X13
	MOVOU    lowNib<>(SB), X14
	MOVOU    eights<>(SB), X15
	MOVOU    highNib<>(SB), X6
	PXOR     X8, X8 // the OR of every run's (code + 8) bytes

runsLoop:
	MOVOU    0(SI), X0  // codes 0..15
	MOVOU    16(SI), X1 // codes 16..31
	MOVOU    X0, X4
	PADDB    X15, X4
	MOVOU    X1, X5
	PADDB    X15, X5
	POR      X5, X4
	POR      X4, X8
	MOVOU    X0, X2
	PAND     X13, X2
	MOVOU    X1, X3
	PAND     X13, X3
	PACKUSWB X3, X2 // a: the even-indexed codes
	PSRLW    $8, X0
	PSRLW    $8, X1
	PACKUSWB X1, X0 // b: the odd-indexed codes
	TESTB    DL, DL
	JZ       runsLow
	MOVOU    X2, X3 // high nibble first: a goes high
	MOVOU    X0, X2
	MOVOU    X3, X0

runsLow:
	PAND  X14, X2 // low nibble
	PSLLW $4, X0
	PAND  X6, X0  // high nibble
	POR   X2, X0
	MOVOU X0, 0(DI)
	ADDQ  $32, SI
	ADDQ  R8, DI
	DECQ  CX
	JNZ   runsLoop

	// Out of range: some (code + 8) byte above 15.
	PAND     X6, X8
	PXOR     X7, X7
	PCMPEQB  X7, X8
	PMOVMSKB X8, AX
	XORL     $0xFFFF, AX
	SETNE    outOfRange+40(FP)
	RET
