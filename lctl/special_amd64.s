#include "textflag.h"

// Sixteen quotes, backslashes and spaces (0x20).
DATA quotes<>+0(SB)/8, $0x2222222222222222
DATA quotes<>+8(SB)/8, $0x2222222222222222
GLOBL quotes<>(SB), RODATA|NOPTR, $16
DATA backslashes<>+0(SB)/8, $0x5c5c5c5c5c5c5c5c
DATA backslashes<>+8(SB)/8, $0x5c5c5c5c5c5c5c5c
GLOBL backslashes<>(SB), RODATA|NOPTR, $16
DATA spaces<>+0(SB)/8, $0x2020202020202020
DATA spaces<>+8(SB)/8, $0x2020202020202020
GLOBL spaces<>(SB), RODATA|NOPTR, $16

// func specialIndex(b []byte) int
//
// Thirty-two bytes at a time with AVX2 (specialAVX2) in a slice of 32 or
// more, else sixteen at a time (SSE2, which every amd64 has): a byte is
// special when it equals '"' or '\\', or when it is below 0x20 as a signed
// byte (a control character, or past ASCII: 0x80-0xff are negative).
// The last bytes of a slice of 32 (16) or more are read as the 32 (16)
// that end it (the bytes read twice were found plain); of a shorter one
// than 16, one at a time.
TEXT ·specialIndex(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), BX
	MOVQ SI, DI
	CMPQ BX, $32
	JB   sse
	CMPB ·specialAVX2(SB), $0
	JEQ  sse
	VPBROADCASTB quotes<>(SB), Y1
	VPBROADCASTB backslashes<>(SB), Y2
	VPBROADCASTB spaces<>(SB), Y3
	LEAQ -32(SI)(BX*1), R8 // the last 32 bytes' start

avxloop:
	VMOVDQU (SI), Y0
	VPCMPEQB Y1, Y0, Y4
	VPCMPEQB Y2, Y0, Y5
	VPOR     Y5, Y4, Y4
	VPCMPGTB Y0, Y3, Y5 // spaces > byte, signed
	VPOR     Y5, Y4, Y4
	VPMOVMSKB Y4, AX
	TESTL    AX, AX
	JNZ      avxfound
	ADDQ     $32, SI
	CMPQ     SI, R8
	JBE      avxloop
	// Fewer than 32 left: the last 32, once.
	LEAQ     32(R8), CX
	CMPQ     SI, CX
	JAE      avxnone // none left
	MOVQ     R8, SI
	VMOVDQU (SI), Y0
	VPCMPEQB Y1, Y0, Y4
	VPCMPEQB Y2, Y0, Y5
	VPOR     Y5, Y4, Y4
	VPCMPGTB Y0, Y3, Y5
	VPOR     Y5, Y4, Y4
	VPMOVMSKB Y4, AX
	TESTL    AX, AX
	JNZ      avxfound
	MOVQ     CX, SI

avxnone:
	VZEROUPPER
	SUBQ  DI, SI
	MOVQ  SI, ret+24(FP)
	RET

avxfound:
	VZEROUPPER
	BSFL  AX, AX
	ADDQ  AX, SI
	SUBQ  DI, SI
	MOVQ  SI, ret+24(FP)
	RET

sse:
	CMPQ BX, $16
	JB   short
	MOVOU quotes<>(SB), X1
	MOVOU backslashes<>(SB), X2
	MOVOU spaces<>(SB), X3
	LEAQ -16(SI)(BX*1), R8 // the last sixteen bytes' start

loop:
	MOVOU (SI), X0
	MOVOU X0, X4
	PCMPEQB X1, X4
	MOVOU X0, X5
	PCMPEQB X2, X5
	POR   X5, X4
	MOVOU X3, X5
	PCMPGTB X0, X5
	POR   X5, X4
	PMOVMSKB X4, AX
	TESTL AX, AX
	JNZ   found
	ADDQ  $16, SI
	CMPQ  SI, R8
	JBE   loop
	// Fewer than sixteen left: the last sixteen, once.
	LEAQ  16(R8), CX
	CMPQ  SI, CX
	JAE   none // none left
	MOVQ  R8, SI
	MOVOU (SI), X0
	MOVOU X0, X4
	PCMPEQB X1, X4
	MOVOU X0, X5
	PCMPEQB X2, X5
	POR   X5, X4
	MOVOU X3, X5
	PCMPGTB X0, X5
	POR   X5, X4
	PMOVMSKB X4, AX
	TESTL AX, AX
	JNZ   found
	MOVQ  CX, SI

none:
	SUBQ  DI, SI
	MOVQ  SI, ret+24(FP)
	RET

found:
	BSFL  AX, AX
	ADDQ  AX, SI
	SUBQ  DI, SI
	MOVQ  SI, ret+24(FP)
	RET

short:
	TESTQ BX, BX
	JZ    none
shortloop:
	MOVBLZX (SI), AX
	CMPB  AL, $0x22
	JEQ   at
	CMPB  AL, $0x5c
	JEQ   at
	CMPB  AL, $0x20
	JB    at
	CMPB  AL, $0x80
	JAE   at
	INCQ  SI
	DECQ  BX
	JNZ   shortloop
at:
	SUBQ  DI, SI
	MOVQ  SI, ret+24(FP)
	RET
