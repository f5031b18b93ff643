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
		// packRuns: consecutive runs (a bad one among good ones, or none) at a stride, the bytes
		// between the runs untouched.
		for i := 0; i+5 <= len(runs); i += 97 {
			group := slices.Concat(runs[i : i+5]...)
			for _, stride := range []int{runLen / 2, 40, 1024} {
				got, want := make([]byte, 4*stride+runLen/2), make([]byte, 4*stride+runLen/2)
				for j := range got {
					got[j], want[j] = byte(j), byte(j)
				}
				wantBad := false
				for j := range 5 {
					wantBad = packRunGo(want[j*stride:j*stride+runLen/2], group[j*runLen:(j+1)*runLen], o) || wantBad
				}
				if gotBad := packRuns(got, stride, group, o); !slices.Equal(got, want) || gotBad != wantBad {
					t.Fatalf("order %d, stride %d: packRuns of runs %d.. = %x, %v; want %x, %v", o, stride, i, got, gotBad, want, wantBad)
				}
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
