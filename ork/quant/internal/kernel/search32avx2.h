// Shared by search32avx2_amd64.s (a group's kernels) and row32avx2_amd64.s (a row's): the
// constants table's operands, the codes of eight values, the reduction of sixteen lane sums, a
// group's maximum, scales and inverses, and the constants they read. DATA here is file-local
// (<>): each file that includes this has its own copy.

// The constants table (consts): the sign mask, 0.49999997, lo and hi, each eight times.
#define SIGN 0(R8)
#define HALF 32(R8)
#define LO 64(R8)
#define HI 96(R8)

// CODE8(OFF) leaves in Y13 clamp(round-half-away(y), lo, hi) and in Y12 y = x·inv for the eight
// values at OFF(SI), the inverse in Y10.
#define CODE8(OFF) \
	VMULPS OFF(SI), Y10, Y12; \
	VANDPS SIGN, Y12, Y13; \
	VORPS HALF, Y13, Y13; \
	VADDPS Y13, Y12, Y13; \
	VROUNDPS $3, Y13, Y13; \
	VMAXPS LO, Y13, Y13; \
	VMINPS HI, Y13, Y13

// REDUCE2 stores at DST reduce16 of the lane sums LO8 (lanes 0-7) and HI8 (8-15): lanes 8 apart,
// then 4, 2 and 1 apart; LO8X is LO8's low half.
#define REDUCE2(LO8, HI8, LO8X, DST) \
	VADDPS HI8, LO8, LO8; \
	VEXTRACTF128 $1, LO8, X12; \
	VADDPS X12, LO8X, LO8X; \
	VSHUFPS $0xEE, LO8X, LO8X, X12; \
	VADDPS X12, LO8X, LO8X; \
	VMOVSHDUP LO8X, X12; \
	VADDSS X12, LO8X, LO8X; \
	VMOVSS LO8X, DST

DATA absBits32<>+0(SB)/4, $0x7FFFFFFF
GLOBL absBits32<>(SB), RODATA|NOPTR, $4

// MAXREDUCE leaves in X0's first lane the unsigned maximum of the sixteen lanes of Y0 and Y1 (X1
// scratch).
#define MAXREDUCE \
	VPMAXUD Y1, Y0, Y0; \
	VEXTRACTI128 $1, Y0, X1; \
	VPMAXUD X1, X0, X0; \
	VPSHUFD $0x4E, X0, X1; \
	VPMAXUD X1, X0, X0; \
	VPSHUFD $0xB1, X0, X1; \
	VPMAXUD X1, X0, X0

// SCALES8 leaves in Y2 the eight candidate scales float32(grid_j·amax/qmax) for the grid at GRID
// (eight float64), amax in every lane of Y0 and qmax in every lane of Y1 (both float64); Y3
// scratch.
#define SCALES8(GRID) \
	VMULPD 0(GRID), Y0, Y2; \
	VDIVPD Y1, Y2, Y2; \
	VMULPD 32(GRID), Y0, Y3; \
	VDIVPD Y1, Y3, Y3; \
	VCVTPD2PSY Y2, X2; \
	VCVTPD2PSY Y3, X3; \
	VINSERTF128 $1, X3, Y2, Y2

// INV8 leaves in Y5 the inverses 1/s of the scales in Y2 in float32, 0 where s = 0; Y4, Y6 and Y7
// scratch.
#define INV8 \
	VBROADCASTSS oneBits32<>(SB), Y4; \
	VDIVPS Y2, Y4, Y5; \
	VXORPS Y6, Y6, Y6; \
	VCMPPS $0, Y6, Y2, Y7; \
	VANDNPS Y5, Y7, Y5

DATA oneBits32<>+0(SB)/4, $0x3F800000
GLOBL oneBits32<>(SB), RODATA|NOPTR, $4
