package registry

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestClipMatchesScan: clip (binary search) returns what clipping every extent returns.
func TestClipMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var exts []Extent
		for off := int64(rng.IntN(5)); len(exts) < rng.IntN(12); {
			n := int64(1 + rng.IntN(9))
			exts = append(exts, Extent{Off: off, Len: n})
			off += n + int64(1+rng.IntN(9))
		}
		off, n := int64(rng.IntN(120)), int64(rng.IntN(60))
		var want []Extent
		for _, e := range exts {
			if lo, hi := max(e.Off, off), min(e.End(), off+n); lo < hi {
				want = append(want, Extent{Off: lo, Len: hi - lo})
			}
		}
		if got := clip(exts, off, n); !reflect.DeepEqual(got, want) {
			t.Fatalf("clip(%v, %d, %d) = %v, want %v", exts, off, n, got, want)
		}
	}
}

// TestManyRangesManyExtents is probe finding F5: checking the ranges of a tar file of 24k ranges
// and 140k extents (a manifest within distribution's 4 MiB limit) clipped every extent for every
// range, 6.7 s of CPU at parse time; it is one pass now.
func TestManyRangesManyExtents(t *testing.T) {
	const ranges, perRange = 24_000, 6
	f := File{Name: "big.gguf", Form: FormTar, RangeSize: MinRangeSize, Digests: FileDigests{Size: ranges * MinRangeSize}}
	for k := range int64(ranges) {
		for j := range int64(perRange) {
			f.Extents = append(f.Extents, Extent{Off: k*MinRangeSize + j*8192, Len: 4096})
		}
	}
	f.Ranges = rangesOf(f.Digests.Size, f.RangeSize)
	segs0 := f.segments()
	var next int64
	for k := range f.Ranges {
		f.Ranges[k].Stored = Extent{Off: next, Len: segs0[k].len()}
		next += segs0[k].len()
	}
	f.Layer.Size = next
	t0 := time.Now()
	if err := f.checkRanges(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("checking %d ranges of %d extents took %v", ranges, len(f.Extents), d)
	}
}
