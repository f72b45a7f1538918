#include "textflag.h"

// Sixteen spaces (0x20) and sixteen DELs (0x7f).
DATA spaces<>+0(SB)/8, $0x2020202020202020
DATA spaces<>+8(SB)/8, $0x2020202020202020
GLOBL spaces<>(SB), RODATA|NOPTR, $16
DATA dels<>+0(SB)/8, $0x7f7f7f7f7f7f7f7f
DATA dels<>+8(SB)/8, $0x7f7f7f7f7f7f7f7f
GLOBL dels<>(SB), RODATA|NOPTR, $16

// func hiddenIndex(b []byte) int
//
// Thirty-two bytes at a time with AVX2 (hiddenAVX2) in a slice of 32 or
// more, else sixteen at a time (SSE2, which every amd64 has): a byte does
// not show when it is below 0x20 as a signed byte (a control character,
// or past ASCII: 0x80-0xff are negative) or equals 0x7f. The last bytes
// of a slice of 32 (16) or more are read as the 32 (16) that end it (the
// bytes read twice were found to show); of one shorter than 16, one at a
// time.
TEXT ·hiddenIndex(SB), NOSPLIT, $0-32
	MOVQ b_base+0(FP), SI
	MOVQ b_len+8(FP), BX
	MOVQ SI, DI
	CMPQ BX, $32
	JB   sse
	CMPB ·hiddenAVX2(SB), $0
	JEQ  sse
	VPBROADCASTB spaces<>(SB), Y1
	VPBROADCASTB dels<>(SB), Y2
	LEAQ -32(SI)(BX*1), R8 // the last 32 bytes' start

avxloop:
	VMOVDQU (SI), Y0
	VPCMPGTB Y0, Y1, Y4 // spaces > byte, signed
	VPCMPEQB Y2, Y0, Y5
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
	VPCMPGTB Y0, Y1, Y4
	VPCMPEQB Y2, Y0, Y5
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
	MOVOU spaces<>(SB), X1
	MOVOU dels<>(SB), X2
	LEAQ -16(SI)(BX*1), R8 // the last sixteen bytes' start

loop:
	MOVOU (SI), X0
	MOVOU X1, X4
	PCMPGTB X0, X4
	MOVOU X0, X5
	PCMPEQB X2, X5
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
	MOVOU X1, X4
	PCMPGTB X0, X4
	MOVOU X0, X5
	PCMPEQB X2, X5
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
	CMPB  AL, $0x20
	JB    at
	CMPB  AL, $0x7f
	JAE   at
	INCQ  SI
	DECQ  BX
	JNZ   shortloop
at:
	SUBQ  DI, SI
	MOVQ  SI, ret+24(FP)
	RET
