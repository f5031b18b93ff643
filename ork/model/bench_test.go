package model

import (
	"context"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas/blas32"
)

// gemmBaseline times a plain float32 matrix multiply (gemmNT, y = x·Wᵀ, as Dense runs it) doing, per op, the
// multiply-adds of the given (N, K) weights for t tokens: the same matmul work as the forward pass.
func gemmBaseline(t int, shapes [][2]int) time.Duration {
	type op struct{ x, w, y blas32.General }
	var ops []op
	for _, s := range shapes {
		n, k := s[0], s[1]
		ops = append(ops, op{
			x: blas32.General{Rows: t, Cols: k, Stride: k, Data: fill(t * k)},
			w: blas32.General{Rows: n, Cols: k, Stride: k, Data: fill(n * k)},
			y: blas32.General{Rows: t, Cols: n, Stride: n, Data: make([]float32, t*n)},
		})
	}
	// testing.Benchmark cannot nest inside a benchmark: time it by hand, at least 3 runs and 0.5 s.
	var runs int
	start := time.Now()
	for runs < 3 || time.Since(start) < 500*time.Millisecond {
		for _, o := range ops {
			gemmNT(o.x, o.w, 0, o.y)
		}
		runs++
	}
	return time.Since(start) / time.Duration(runs)
}

func fill(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%17)*0.01 - 0.08
	}
	return v
}

// linearShapes lists the (N, K) of every matmul of a forward pass over cfg (blocks and output).
func linearShapes(c *Config, layers int, output bool) [][2]int {
	var s [][2]int
	for l := 0; l < layers; l++ {
		s = append(s, [2]int{c.QDim(), c.NEmbd}, [2]int{c.KVDim(), c.NEmbd}, [2]int{c.KVDim(), c.NEmbd},
			[2]int{c.NEmbd, c.QDim()}, [2]int{c.NFF, c.NEmbd}, [2]int{c.NFF, c.NEmbd}, [2]int{c.NEmbd, c.NFF})
	}
	if output {
		s = append(s, [2]int{c.NVocab, c.NEmbd})
	}
	return s
}

// BenchmarkForwardStories260K runs one 512-token chunk through stories260K (weights cached) and reports
// tokens/s next to a plain matrix multiply of the same shapes in the same run.
func BenchmarkForwardStories260K(b *testing.B) {
	src := storiesSource(b)
	cfg, err := ConfigFromGGUF(src.File())
	if err != nil {
		b.Fatal(err)
	}
	m, _ := NewModel(cfg, src)
	const t = 512
	toks := make([]int32, t)
	for i := range toks {
		toks[i] = int32((i*37 + 1) % cfg.NVocab)
	}
	ctx := context.Background()
	if _, err := m.Forward(ctx, toks); err != nil { // warm the cache
		b.Fatal(err)
	}
	base := gemmBaseline(t, linearShapes(&cfg, cfg.NLayer, true))
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.Forward(ctx, toks); err != nil {
			b.Fatal(err)
		}
	}
	reportVsBaseline(b, t, base)
}

// reportVsBaseline reports tokens/s of the benchmark and of the baseline, and the time ratio.
func reportVsBaseline(b *testing.B, tokens int, base time.Duration) {
	per := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(tokens)/per, "tok/s")
	b.ReportMetric(float64(tokens)/base.Seconds(), "gemm-tok/s")
	b.ReportMetric(per/base.Seconds(), "x-gemm-time")
}

var (
	wideOnce  sync.Once
	wideLayer *Layer
	wideModel *Model
)

// BenchmarkLayer5120 runs one generated 5120-wide block (40/8 heads of 128, n_ff 8192) over 64 tokens
// and reports tokens/s next to a plain matrix multiply of the block's shapes in the same run.
func BenchmarkLayer5120(b *testing.B) {
	cfg := Config{Arch: "llama", NEmbd: 5120, NFF: 8192, NLayer: 1, NHead: 40, NHeadKV: 8, HeadDim: 128,
		NVocab: 256, RopeDim: 128, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5}
	ctx := context.Background()
	wideOnce.Do(func() {
		src, err := NewSyntheticSource(cfg, 1)
		if err != nil {
			panic(err)
		}
		wideModel, _ = NewModel(cfg, src)
		if wideLayer, err = LoadLayer(ctx, &cfg, src, 0); err != nil {
			panic(err)
		}
	})
	const t = 64
	h0 := fill(t * cfg.NEmbd)
	h := make([]float32, len(h0))
	base := gemmBaseline(t, linearShapes(&cfg, 1, false))
	b.ResetTimer()
	for b.Loop() {
		copy(h, h0)
		if err := wideModel.RunLayer(ctx, wideLayer, h, nil); err != nil {
			b.Fatal(err)
		}
	}
	reportVsBaseline(b, t, base)
}

// BenchmarkLayerMoE runs one generated MoE block (n_embd 2048, 16/4 heads of 128, 8 experts of n_ff 1408,
// top-2) over 128 tokens and reports tokens/s next to a plain matrix multiply of the same work in the
// same run: the attention and router shapes for 128 tokens, and every expert's three shapes for an even
// share (128·2/8 rows) of the routed tokens.
func BenchmarkLayerMoE(b *testing.B) {
	cfg := Config{Arch: "llama", NEmbd: 2048, NFF: 1408, NLayer: 1, NHead: 16, NHeadKV: 4, HeadDim: 128,
		NVocab: 256, RopeDim: 128, RopeBase: 10000, RopeFreqScale: 1, NormEps: 1e-5, NExpert: 8, NExpertUsed: 2}
	ctx := context.Background()
	src, err := NewSyntheticSource(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	m, _ := NewModel(cfg, src)
	l, err := LoadLayer(ctx, &cfg, src, 0)
	if err != nil {
		b.Fatal(err)
	}
	const t = 128
	h0 := fill(t * cfg.NEmbd)
	for i := range h0 { // distinct tokens, so that routing spreads over the experts
		h0[i] *= float32(1 + (i/cfg.NEmbd)%7)
	}
	h := make([]float32, len(h0))
	attn := [][2]int{{cfg.QDim(), cfg.NEmbd}, {cfg.KVDim(), cfg.NEmbd}, {cfg.KVDim(), cfg.NEmbd}, {cfg.NEmbd, cfg.QDim()}, {cfg.NExpert, cfg.NEmbd}}
	var experts [][2]int
	for range cfg.NExpert {
		experts = append(experts, [2]int{cfg.NFF, cfg.NEmbd}, [2]int{cfg.NFF, cfg.NEmbd}, [2]int{cfg.NEmbd, cfg.NFF})
	}
	base := gemmBaseline(t, attn) + gemmBaseline(t*cfg.NExpertUsed/cfg.NExpert, experts)
	b.ResetTimer()
	for b.Loop() {
		copy(h, h0)
		if err := m.RunLayer(ctx, l, h, nil); err != nil {
			b.Fatal(err)
		}
	}
	reportVsBaseline(b, t, base)
}
