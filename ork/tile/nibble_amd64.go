package tile

// unpackRunSSE2 and packRunSSE2 are unpackRunGo and packRunGo for one run (nibble_amd64.s).
//
//go:noescape
func unpackRunSSE2(run *int8, in *byte, highFirst bool)

//go:noescape
func packRunSSE2(out *byte, run *int8, highFirst bool) (outOfRange bool)

// packRunsSSE2 is packRunSSE2 of count (positive) consecutive runs, the i-th written at out + i·stride.
//
//go:noescape
func packRunsSSE2(out *byte, stride int, runs *int8, count int, highFirst bool) (outOfRange bool)

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

// packRuns is packRun of the len(runs)/32 consecutive runs at runs, the i-th written to out[i·stride:],
// and reports whether any code is outside -8..7.
func packRuns(out []byte, stride int, runs []int8, o NibbleOrder) (outOfRange bool) {
	count := len(runs) / runLen
	if count == 0 {
		return false
	}
	if stride < runLen/2 {
		panic("tile: packRuns stride below a run's 16 bytes")
	}
	_ = out[(count-1)*stride+runLen/2-1]
	return packRunsSSE2(&out[0], stride, &runs[0], count, o == HighFirst)
}
