package tile

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestNibbleKernels: packRun and unpackRun (the SSE2 kernels on amd64) give exactly packRunGo's and
// unpackRunGo's bytes, codes and out-of-range answer, in both nibble orders — for runs of in-range
// codes, every byte pattern, and runs with one code out of range at each position.
func TestNibbleKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var runs [][]int8
	for range 2000 {
		run := make([]int8, runLen)
		for i := range run {
			run[i] = int8(r.IntN(16) - 8)
		}
		runs = append(runs, run)
	}
	for pos := range runLen {
		for _, v := range []int8{8, -9, 127, -128, 16, 100} {
			run := make([]int8, runLen)
			for i := range run {
				run[i] = int8(r.IntN(16) - 8)
			}
			run[pos] = v
			runs = append(runs, run)
		}
	}
	for _, o := range []NibbleOrder{LowFirst, HighFirst} {
		for _, run := range runs {
			got, want := make([]byte, runLen/2), make([]byte, runLen/2)
			gotBad, wantBad := packRun(got, run, o), packRunGo(want, run, o)
			if !slices.Equal(got, want) || gotBad != wantBad {
				t.Fatalf("order %d: packRun(%v) = %x, %v; want %x, %v", o, run, got, gotBad, want, wantBad)
			}
		}
		for b := range 256 {
			in := make([]byte, runLen/2)
			for i := range in {
				in[i] = byte(b + 17*i)
			}
			got, want := make([]int8, runLen), make([]int8, runLen)
			unpackRun(got, in, o)
			unpackRunGo(want, in, o)
			if !slices.Equal(got, want) {
				t.Fatalf("order %d: unpackRun(%x) = %v, want %v", o, in, got, want)
			}
		}
	}
}
