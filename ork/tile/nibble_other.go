//go:build !amd64

package tile

// unpackRun is packRun's inverse: 16 bytes to 32 sign-extended int4 codes.
func unpackRun(run []int8, in []byte, o NibbleOrder) { unpackRunGo(run, in, o) }

// packRun writes 32 codes as 16 bytes in nibble order o and reports whether any code is outside
// -8..7 (its bits are then cut to four).
func packRun(out []byte, run []int8, o NibbleOrder) (outOfRange bool) { return packRunGo(out, run, o) }

// packRuns is packRun of the len(runs)/32 consecutive runs at runs, the i-th written to out[i·stride:],
// and reports whether any code is outside -8..7.
func packRuns(out []byte, stride int, runs []int8, o NibbleOrder) (outOfRange bool) {
	for i := range len(runs) / runLen {
		if packRunGo(out[i*stride:i*stride+runLen/2], runs[i*runLen:(i+1)*runLen], o) {
			outOfRange = true
		}
	}
	return outOfRange
}
