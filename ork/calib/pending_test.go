package calib

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand"
	"testing"

	"orkpipe/ork/model"
)

// encodeAll encodes the whole data range of a Hessian file of K in pieces of cut bytes with enc.
func encodeAll(t *testing.T, k int, cut int64, enc func([]byte, int64) error) []byte {
	t.Helper()
	size := HessianDataSize(k)
	out := make([]byte, size)
	for off := int64(0); off < size; off += cut {
		if err := enc(out[off:min(off+cut, size)], off); err != nil {
			t.Fatalf("K=%d, bytes from %d: %v", k, off, err)
		}
	}
	return out
}

// TestEncoderPending: a Hessian whose last update is pending encodes, through Encoder, to the bytes of
// the same Hessian with that update flushed (EncodeHessian) — with and without earlier updates, for
// blocks smaller than the matrix (many bands and column blocks) and the default ones, whatever the cut
// of the file into ranges (ranges starting and ending mid-row, in the header, one value long).
func TestEncoderPending(t *testing.T) {
	defer func(b, c int) { encodeBand, encodeCols = b, c }(encodeBand, encodeCols)
	r := rand.New(rand.NewSource(7))
	for _, k := range []int{1, 37, 300} {
		for _, rows := range []int{1, 37, 200} {
			for _, prior := range []bool{false, true} {
				x := make([]float32, 2*rows*k)
				for i := range x {
					x[i] = float32(r.NormFloat64())
				}
				first := x[:rows*k]
				if prior {
					first = x[:(rows+3)*k%len(x)+k] // earlier rows: a different count
				}
				last := x[rows*k:]
				// want takes both updates; got leaves the last pending.
				want, got := NewHessian(k), NewHessian(k)
				var acc [2]*accumulator
				for i, h := range []*Hessian{want, got} {
					acc[i] = newAccumulator(h, &rowBatch{limit: 2 * rows})
					if prior {
						must(t, acc[i].add(first))
						acc[i].flush()
					}
					must(t, acc[i].add(last))
				}
				acc[0].flush()
				res := &Result{}
				res.deferLast(acc[1])
				if got.Tokens != want.Tokens {
					t.Fatalf("K=%d: tokens %d, want %d", k, got.Tokens, want.Tokens)
				}
				wantBytes := encodeAll(t, k, HessianDataSize(k), func(d []byte, off int64) error { return EncodeHessian(want, d, off) })
				for _, blk := range [][2]int{{512, 2048}, {7, 64}, {1, 1}} {
					if blk[0] == 1 && k > 37 {
						continue
					}
					encodeBand, encodeCols = blk[0], blk[1]
					for _, cut := range []int64{HessianDataSize(k), 4, 36, 1236} {
						enc := res.Encoder(got)
						if b := encodeAll(t, k, cut, enc.Encode); !bytes.Equal(b, wantBytes) {
							t.Fatalf("K=%d rows=%d prior=%v blocks %v cut %d: encoded bytes differ from the flushed Hessian's", k, rows, prior, blk, cut)
						}
					}
				}
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestEncoderPendingNotFinite: a pending row holding an Inf makes Encode fail with ErrNotFinite naming
// the first bad value of the range.
func TestEncoderPendingNotFinite(t *testing.T) {
	const k = 40
	x := make([]float32, 3*k)
	for i := range x {
		x[i] = 1
	}
	x[k+5] = float32(math.Inf(1))
	h := NewHessian(k)
	a := newAccumulator(h, nil)
	must(t, a.add(x))
	res := &Result{}
	res.deferLast(a)
	err := res.Encoder(h).Encode(make([]byte, HessianDataSize(k)), 0)
	if !errors.Is(err, ErrNotFinite) {
		t.Fatalf("Encode: %v, want ErrNotFinite", err)
	}
	if want := "hessian at (0,5)"; !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Fatalf("Encode: %v, want it to name %s", err, want)
	}
}

// upperAndDeferred runs CaptureUpper and CaptureDeferred of window w of m over seqs.
func upperAndDeferred(t *testing.T, m *model.Model, seqs [][]int32, w Window) (upper, deferred *Result) {
	t.Helper()
	run := func(capture func(HiddenSource) (*Result, error)) *Result {
		in, err := NewEmbeddingSource(m, seqs)
		must(t, err)
		r, err := capture(in)
		must(t, err)
		return r
	}
	ctx := context.Background()
	upper = run(func(in HiddenSource) (*Result, error) { return CaptureUpper(ctx, m, w, in, nil) })
	deferred = run(func(in HiddenSource) (*Result, error) { return CaptureDeferred(ctx, m, w, in, nil, nil) })
	return upper, deferred
}

// TestCaptureDeferredBytes: the files CaptureDeferred's encoders give are those of CaptureUpper's
// Hessians, byte for byte, over a two-block window (the first block's Hessians flushed when the second
// takes their shared batch) for corpora of one update (1 and 4 sequences of 128 tokens) and of two (5).
func TestCaptureDeferredBytes(t *testing.T) {
	m, seqs := storiesModel(t)
	for _, n := range []int{1, 4, 5} {
		upper, deferred := upperAndDeferred(t, m, seqs[:n], Window{Start: 0, End: 2})
		if len(deferred.pending) == 0 {
			t.Fatalf("%d sequences: no update left pending", n)
		}
		for l := 0; l < 2; l++ {
			for i, hs := range upper.Layers[l] {
				for e, a := range hs {
					b := deferred.Layers[l][i][e]
					p := deferred.pending[b]
					if onlyPending := p != nil && !p.prior; onlyPending != (b.Data == nil) {
						t.Fatalf("%d sequences, layer %d site %d: Data allocated %v with the only update pending %v", n, l, i, b.Data != nil, onlyPending)
					}
					want := encodeAll(t, a.K, 4096, func(d []byte, off int64) error { return EncodeHessian(a, d, off) })
					got := encodeAll(t, b.K, 4096, deferred.Encoder(b).Encode)
					if !bytes.Equal(got, want) {
						t.Fatalf("%d sequences, layer %d site %d: CaptureDeferred's file differs from CaptureUpper's", n, l, i)
					}
				}
			}
		}
	}
}

// TestCaptureDeferredSparse: a deferred capture of a generated 512-wide block over 640 tokens (one
// update flushed, the last left pending) makes its Hessians of 2 MiB and more outside the Go heap
// (hugebuf.MakeSparse): their files are CaptureUpper's byte for byte, and Release frees them (Data
// becomes nil).
func TestCaptureDeferredSparse(t *testing.T) {
	cfg := model.Config{Arch: "llama", NEmbd: 512, NFF: 1024, NLayer: 1, NHead: 8, NHeadKV: 8, HeadDim: 64,
		NVocab: 256, RopeDim: 64, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5}
	src, err := model.NewSyntheticSource(cfg, 3)
	must(t, err)
	m, err := model.NewModel(cfg, src)
	must(t, err)
	seqs := make([][]int32, 5)
	for i := range seqs {
		seqs[i] = make([]int32, 128)
		for j := range seqs[i] {
			seqs[i][j] = int32((i*37 + j*11 + j*j) % cfg.NVocab)
		}
	}
	upper, deferred := upperAndDeferred(t, m, seqs, Window{Start: 0, End: 1})
	if len(deferred.sparse) != len(upper.Layers[0]) {
		t.Fatalf("%d sparse Hessians, want one a site (%d)", len(deferred.sparse), len(upper.Layers[0]))
	}
	for i, hs := range upper.Layers[0] {
		a, b := hs[0], deferred.Layers[0][i][0]
		if b.Data == nil || deferred.pending[b] == nil || !deferred.pending[b].prior {
			t.Fatalf("site %d: want an update flushed into Data and one pending", i)
		}
		want := encodeAll(t, a.K, 1<<20, func(d []byte, off int64) error { return EncodeHessian(a, d, off) })
		if got := encodeAll(t, b.K, 1<<20, deferred.Encoder(b).Encode); !bytes.Equal(got, want) {
			t.Fatalf("site %d (K %d): the sparse Hessian's file differs from CaptureUpper's", i, a.K)
		}
	}
	deferred.Release()
	for i, hs := range deferred.Layers[0] {
		if hs[0].Data != nil {
			t.Errorf("site %d: Data kept after Release", i)
		}
	}
}
