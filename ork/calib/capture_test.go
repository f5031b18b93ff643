package calib

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/model"
)

func storiesModel(t testing.TB) (*model.Model, [][]int32) {
	t.Helper()
	return calibModel(t, "stories260K.gguf", 8, 128)
}

// calibModel opens the shared test model file and cuts n sequences of ctxLen tokens (BOS first) of
// stories-calib.txt.
func calibModel(t testing.TB, file string, n, ctxLen int) (*model.Model, [][]int32) {
	t.Helper()
	ctx := context.Background()
	m, tok, f, err := model.OpenGGUF(ctx, testfiles.Path(t, file), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	text, err := os.ReadFile(testfiles.Path(t, "stories-calib.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(string(text), true, false)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := Sequences(ids, n, ctxLen, tok.Vocab().BOS)
	if err != nil {
		t.Fatal(err)
	}
	return m, seqs
}

// captureToFile runs Capture on window w from src and stores the hidden states at w.End in a file.
func captureToFile(t *testing.T, m *model.Model, w Window, src HiddenSource, path string) *Result {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hdr := src.Header()
	hdr.Layer = w.End
	out, err := NewHiddenWriter(f, hdr)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Capture(context.Background(), m, w, src, out)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func openHidden(t *testing.T, path string) *HiddenReader {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewHiddenReader(bytes.NewReader(b), path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestWindowsChain: the Hessians of window [0, 5) computed in one pass equal those of [0, 2) and [2, 5)
// chained through the stored hidden states, and so do the hidden states at layer 5.
func TestWindowsChain(t *testing.T) {
	m, seqs := storiesModel(t)
	dir := t.TempDir()
	src := func() HiddenSource {
		s, err := NewEmbeddingSource(m, seqs)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	whole := captureToFile(t, m, Window{Start: 0, End: 5}, src(), filepath.Join(dir, "whole.5"))
	first := captureToFile(t, m, Window{Start: 0, End: 2}, src(), filepath.Join(dir, "a.2"))
	second := captureToFile(t, m, Window{Start: 2, End: 5}, openHidden(t, filepath.Join(dir, "a.2")), filepath.Join(dir, "b.5"))
	for l := 0; l < 5; l++ {
		part := first
		if l >= 2 {
			part = second
		}
		for in := model.Input(0); in < model.NumInputs; in++ {
			a, b := whole.Hessian(l, in), part.Hessian(l, in)
			if a.Tokens != 8*128 || b.Tokens != a.Tokens {
				t.Fatalf("layer %d %v: tokens %d and %d, want %d", l, in, a.Tokens, b.Tokens, 8*128)
			}
			if d := maxRelDiff(a.Data, b.Data); d > 1e-6 {
				t.Errorf("layer %d %v: one pass and chained windows differ by %.3g (relative to max |H|)", l, in, d)
			}
			if err := a.Check(); err != nil {
				t.Errorf("layer %d %v: %v", l, in, err)
			}
			checkPSD(t, a)
		}
	}
	ha, hb := openHidden(t, filepath.Join(dir, "whole.5")), openHidden(t, filepath.Join(dir, "b.5"))
	for s := 0; ; s++ {
		x, errA := ha.Next(context.Background())
		xa := append([]float32(nil), x...)
		y, errB := hb.Next(context.Background())
		if errors.Is(errA, io.EOF) && errors.Is(errB, io.EOF) {
			if s != 8 {
				t.Fatalf("%d sequences, want 8", s)
			}
			break
		}
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		for i := range xa {
			if math.Abs(float64(xa[i]-y[i])) > 1e-5*(1+math.Abs(float64(xa[i]))) {
				t.Fatalf("sequence %d value %d: %v vs %v", s, i, xa[i], y[i])
			}
		}
	}
}

func maxRelDiff(a, b []float64) float64 {
	var mx, d float64
	for i := range a {
		mx = math.Max(mx, math.Abs(a[i]))
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d / mx
}

// checkPSD asserts the smallest eigenvalue of h is >= -1e-9 of the largest.
func checkPSD(t *testing.T, h *Hessian) {
	t.Helper()
	var es mat.EigenSym
	if !es.Factorize(mat.NewSymDense(h.K, append([]float64(nil), h.Data...)), false) {
		t.Fatalf("eigendecomposition of %dx%d hessian failed", h.K, h.K)
	}
	v := es.Values(nil)
	if lo, hi := v[0], v[len(v)-1]; lo < -1e-9*hi || hi <= 0 {
		t.Errorf("hessian %dx%d eigenvalues in [%g, %g]: not positive semi-definite", h.K, h.K, lo, hi)
	}
}

// TestAccumulateMatchesNaive compares the accumulation (striped Gemm in the pure-Go build, OpenBLAS's
// tiles of dsyrk and dgemm) with a plain triple loop.
func TestAccumulateMatchesNaive(t *testing.T) {
	for _, k := range []int{1, 7, 255, 256, 300, 600, blasTile + 4} { // blasTile + 4: OpenBLAS's tiles, a partial one
		const rows = 37
		x := make([]float32, rows*k)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)*0.37) * (1 + float64(i%5)))
		}
		h := NewHessian(k)
		if err := h.Add(x[:20*k]); err != nil {
			t.Fatal(err)
		}
		if err := h.Add(x[20*k:]); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, k*k)
		for r := 0; r < rows; r++ {
			for i := 0; i < k; i++ {
				for j := i; j < k; j++ {
					want[i*k+j] += float64(x[r*k+i]) * float64(x[r*k+j])
				}
			}
		}
		for i := 0; i < k; i++ {
			for j := 0; j < i; j++ {
				want[i*k+j] = want[j*k+i]
			}
		}
		if d := maxRelDiff(want, h.Data); d > 1e-12 || h.Tokens != rows {
			t.Errorf("K=%d: relative difference %g, tokens %d", k, d, h.Tokens)
		}
		if err := h.Check(); err != nil {
			t.Errorf("K=%d: %v", k, err)
		}
	}
}

// TestSharedBatch: two accumulators sharing one row batch (as the same input of consecutive blocks
// do), fed in turns with pieces that cross the batch limit, each end with exactly its own rows' sum.
func TestSharedBatch(t *testing.T) {
	const k = 9
	for _, limit := range []int{1, 4, 7, 64} {
		b := &rowBatch{limit: limit}
		accs := [2]*accumulator{newAccumulator(NewHessian(k), b), newAccumulator(NewHessian(k), b)}
		want := [2][]float64{make([]float64, k*k), make([]float64, k*k)}
		rows := [2]int64{}
		for step, n := range []int{3, 5, 1, 9, 2, 6} {
			i := step % 2
			x := make([]float32, n*k)
			for j := range x {
				x[j] = float32(math.Cos(float64(step*100+j)) * 3)
			}
			if err := accs[i].add(x); err != nil {
				t.Fatal(err)
			}
			for r := 0; r < n; r++ {
				for p := 0; p < k; p++ {
					for q := p; q < k; q++ {
						want[i][p*k+q] += float64(x[r*k+p]) * float64(x[r*k+q])
					}
				}
			}
			rows[i] += int64(n)
		}
		for i, a := range accs {
			a.flush()
			a.h.Symmetrize()
			for p := 0; p < k; p++ {
				for q := 0; q < p; q++ {
					want[i][p*k+q] = want[i][q*k+p]
				}
			}
			if d := maxRelDiff(want[i], a.h.Data); d > 1e-12 || a.h.Tokens != rows[i] {
				t.Errorf("limit %d, accumulator %d: relative difference %g, tokens %d (want %d)", limit, i, d, a.h.Tokens, rows[i])
			}
		}
	}
}

// TestCaptureUpper: CaptureUpper's upper triangles are Capture's, bit for bit, and Symmetrize completes
// them to Capture's Hessians.
func TestCaptureUpper(t *testing.T) {
	m, seqs := storiesModel(t)
	run := func(f func(context.Context, *model.Model, Window, HiddenSource, *HiddenWriter) (*Result, error)) *Result {
		src, err := NewEmbeddingSource(m, seqs[:5])
		if err != nil {
			t.Fatal(err)
		}
		r, err := f(context.Background(), m, Window{Start: 0, End: 2}, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	full, upper := run(Capture), run(CaptureUpper)
	for l := 0; l < 2; l++ {
		for in := model.Input(0); in < model.NumInputs; in++ {
			a, b := full.Hessian(l, in), upper.Hessian(l, in)
			if a.Tokens != b.Tokens || a.Tokens != 5*128 {
				t.Fatalf("layer %d %v: tokens %d and %d, want %d", l, in, a.Tokens, b.Tokens, 5*128)
			}
			for i := 0; i < a.K; i++ {
				for j := i; j < a.K; j++ {
					if b.Data[i*a.K+j] != a.Data[i*a.K+j] {
						t.Fatalf("layer %d %v (%d,%d): CaptureUpper %v, Capture %v", l, in, i, j, b.Data[i*a.K+j], a.Data[i*a.K+j])
					}
				}
			}
			b.Symmetrize()
			if !equalF64(a.Data, b.Data) {
				t.Errorf("layer %d %v: CaptureUpper then Symmetrize differs from Capture", l, in)
			}
		}
	}
}

// wideConfig is a generated 5120-wide llama block (GQA 40/8 heads of 128, n_ff 8192).
func wideConfig(layers int) model.Config {
	return model.Config{Arch: "llama", NEmbd: 5120, NFF: 8192, NLayer: layers, NHead: 40, NHeadKV: 8, HeadDim: 128,
		NVocab: 256, RopeDim: 128, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5}
}

// TestMemoryEstimate compares EstimateMemory with the peak heap Capture reaches on one 5120-wide window.
func TestMemoryEstimate(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "allocates about 1.5 GiB")
	}
	checkMemoryEstimate(t, "5120-wide window", wideConfig(1))
}

// checkMemoryEstimate measures the peak heap of Capture on window [0, 1) of a generated model of shape
// cfg (2 sequences of 32 tokens, the layer-0 input read from a stored file) and requires EstimateMemory
// to be within 20% of it.
func checkMemoryEstimate(t *testing.T, what string, cfg model.Config) {
	src, err := model.NewSyntheticSource(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.NewModel(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	const seqLen, nSeq = 32, 2
	seqs := make([][]int32, nSeq)
	for i := range seqs {
		seqs[i] = make([]int32, seqLen)
		for j := range seqs[i] {
			seqs[i][j] = int32((i*31 + j*7) % cfg.NVocab)
		}
	}
	// The layer-0 input is read from a stored file (as every window but the first), so the input
	// buffers the estimate counts are in use.
	var buf bytes.Buffer
	es, _ := NewEmbeddingSource(m, seqs)
	hw, _ := NewHiddenWriter(&buf, es.Header())
	for {
		h, err := es.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err := hw.WriteSeq(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := hw.Close(); err != nil {
		t.Fatal(err)
	}
	in, err := NewHiddenReader(bytes.NewReader(buf.Bytes()), "layer0")
	if err != nil {
		t.Fatal(err)
	}
	hdr := in.Header()
	hdr.Layer = 1
	out, err := NewHiddenWriter(io.Discard, hdr)
	if err != nil {
		t.Fatal(err)
	}

	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	res, err := Capture(context.Background(), m, Window{Start: 0, End: 1}, in, out)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(res)
	measured := int64(peak.Load()) - int64(base.HeapAlloc)
	est := EstimateMemory(&cfg, Window{Start: 0, End: 1}, len(seqs), seqLen)
	ratio := float64(est) / float64(measured)
	t.Logf("%s: estimate %d MiB, measured peak %d MiB (ratio %.3f)", what, est>>20, measured>>20, ratio)
	if ratio < 0.8 || ratio > 1.2 {
		t.Errorf("%s: estimate %d is not within 20%% of the measured peak %d", what, est, measured)
	}
}
