package tile

// unpackRunSSE2 and packRunSSE2 are unpackRunGo and packRunGo for one run (nibble_amd64.s).
//
//go:noescape
func unpackRunSSE2(run *int8, in *byte, highFirst bool)

//go:noescape
func packRunSSE2(out *byte, run *int8, highFirst bool) (outOfRange bool)

// unpackRun is packRun's inverse: 16 bytes to 32 sign-extended int4 codes.
func unpackRun(run []int8, in []byte, o NibbleOrder) {
	_ = run[runLen-1]
	_ = in[runLen/2-1]
	unpackRunSSE2(&run[0], &in[0], o == HighFirst)
}

// packRun writes 32 codes as 16 bytes in nibble order o and reports whether any code is outside
// -8..7 (its bits are then cut to four).
func packRun(out []byte, run []int8, o NibbleOrder) (outOfRange bool) {
	_ = out[runLen/2-1]
	_ = run[runLen-1]
	return packRunSSE2(&out[0], &run[0], o == HighFirst)
}
