package quant

import (
	"fmt"
	"math"
	"runtime"
	"testing"
)

// applyPlain is Apply as it was before it ran block by block in a pooled scratch: the whole padded
// row in a float64 buffer and the signs as a float64 vector, both allocated every call. It is the
// oracle Apply must equal bit for bit, and the baseline of BenchmarkRotationApply.
func applyPlain(r Rotation, dst, src []float32, rows int) {
	d := r.signVector()
	buf := make([]float64, r.Padded)
	for i := 0; i < rows; i++ {
		s := src[i*r.K : (i+1)*r.K]
		for j := range buf {
			buf[j] = 0
		}
		for j, v := range s {
			buf[j] = float64(v)
		}
		r.rotate64(buf, d)
		o := dst[i*r.Padded : (i+1)*r.Padded]
		for j, v := range buf {
			o[j] = float32(v)
		}
	}
}

// inversePlain is Inverse as it was: the oracle of Inverse.
func inversePlain(r Rotation, dst, src []float32, rows int) {
	d := r.signVector()
	buf := make([]float64, r.Padded)
	for i := 0; i < rows; i++ {
		for j, v := range src[i*r.Padded : (i+1)*r.Padded] {
			buf[j] = float64(v)
		}
		fwhtBlocks(buf, r.Block)
		if d != nil {
			for j := range buf {
				buf[j] *= d[j]
			}
		}
		o := dst[i*r.K : (i+1)*r.K]
		for j := range o {
			o[j] = float32(buf[j])
		}
	}
}

// TestRotationBlockwiseMatchesPlain: Apply and Inverse, block by block with the signs as bits, give
// the values of the whole-row form bit for bit (negative zeros of the padding included), for K
// padded or not, one block or several, with and without signs, and for a scratch the pool hands
// back holding another rotation's signs.
func TestRotationBlockwiseMatchesPlain(t *testing.T) {
	const rows = 5
	for _, c := range []struct{ k, minBlock int }{{64, 32}, {172, 32}, {96, 32}, {100, 256}, {5120, 32}, {2880, 32}, {1, 32}, {4096, 4096}, {3000, 1024}} {
		for _, signs := range []bool{false, true} {
			for _, seed := range []uint64{3, 4} {
				r, err := NewRotationMinBlock(c.k, signs, seed, c.minBlock)
				if err != nil {
					t.Fatal(err)
				}
				src := randMatrix("x", rows, c.k, uint64(c.k)+seed).Data
				src[0] = 0 // a zero the signs may make negative
				got, want := make([]float32, rows*r.Padded), make([]float32, rows*r.Padded)
				if err := r.Apply(got, src, rows); err != nil {
					t.Fatal(err)
				}
				applyPlain(r, want, src, rows)
				name := fmt.Sprintf("K=%d padded %d block %d signs %v seed %d", c.k, r.Padded, r.Block, signs, seed)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: Apply value %d is %v, whole-row %v", name, i, got[i], want[i])
					}
				}
				back, wantBack := make([]float32, rows*c.k), make([]float32, rows*c.k)
				if err := r.Inverse(back, got, rows); err != nil {
					t.Fatal(err)
				}
				inversePlain(r, wantBack, got, rows)
				for i := range back {
					if math.Float32bits(back[i]) != math.Float32bits(wantBack[i]) {
						t.Fatalf("%s: Inverse value %d is %v, whole-row %v", name, i, back[i], wantBack[i])
					}
				}
			}
		}
	}
}

// TestRotationApplyAllocs: Apply and Inverse allocate nothing once the pool holds a scratch (they
// allocated the padded row and the sign vector, 16·Padded bytes, every call: an emulated weight's
// every batch, on every worker, uncounted in model.EmulationBytes), and a first call allocates what
// ScratchBytes says, not more.
func TestRotationApplyAllocs(t *testing.T) {
	const rows = 4
	r, err := NewRotation(5120, true, 7)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := randMatrix("x", rows, r.K, 1).Data, make([]float32, rows*r.Padded)
	back := make([]float32, rows*r.K)
	if a := testing.AllocsPerRun(20, func() {
		if err := r.Apply(dst, src, rows); err != nil {
			t.Fatal(err)
		}
	}); a >= 1 {
		t.Errorf("Apply of %d rows of %d: %.1f allocations a call, want none", rows, r.K, a)
	}
	if a := testing.AllocsPerRun(20, func() {
		if err := r.Inverse(back, dst, rows); err != nil {
			t.Fatal(err)
		}
	}); a >= 1 {
		t.Errorf("Inverse of %d rows of %d: %.1f allocations a call, want none", rows, r.K, a)
	}
	// A first call, on an empty pool (two collections empty it), of a rotation of one large block.
	big := Rotation{K: 1 << 16, Padded: 1 << 16, Block: 1 << 16, Signs: true, Seed: 9}
	src, dst = make([]float32, big.K), make([]float32, big.Padded)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := big.Apply(dst, src, 1); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	want, ok := big.ScratchBytes()
	t.Logf("first Apply of one row of %d values: %d bytes allocated, ScratchBytes %d", big.K, alloc, want)
	if !ok || alloc > uint64(want)+4<<10 {
		t.Errorf("first Apply of one row of %d values allocated %d bytes, more than ScratchBytes %d (%v)", big.K, alloc, want, ok)
	}
}

// BenchmarkRotationApply rotates 256 rows of 5120 values (the 27B width: blocks of 1024) and 1 row
// (a decoding token): blockwise is Apply, plain the whole-row form it replaced (applyPlain), in one
// run so that the two can be compared on one machine's noise.
func BenchmarkRotationApply(b *testing.B) {
	const k = 5120
	r, err := NewRotation(k, true, 3)
	if err != nil {
		b.Fatal(err)
	}
	for _, rows := range []int{256, 1} {
		src := randMatrix("x", rows, k, 2).Data
		dst := make([]float32, rows*r.Padded)
		b.Run(fmt.Sprintf("rows=%d/blockwise", rows), func(b *testing.B) {
			b.SetBytes(int64(len(src) * 4))
			b.ReportAllocs()
			for b.Loop() {
				if err := r.Apply(dst, src, rows); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("rows=%d/plain", rows), func(b *testing.B) {
			b.SetBytes(int64(len(src) * 4))
			b.ReportAllocs()
			for b.Loop() {
				applyPlain(r, dst, src, rows)
			}
		})
	}
}
