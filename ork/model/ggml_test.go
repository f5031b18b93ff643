package model

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/quant"
)

// TestHybridPerplexityGGML evaluates the hybrid fixtures with the ggml-exact pass (Model.GGMLExact, ggml
// products) against llama.cpp 3f545bec's default perplexities (F16 K/V cache, flash attention, -b 2048:
// ../shared/testdata/SOURCES.md and hybrid/REFERENCE.md), within 1e-4 relative. The Q8_0 files reproduce
// llama.cpp's figures to the last printed digit (their activation rounding absorbs the last-bit
// differences of expf/logf/sincosf, see the package doc); the F32 and F16 files differ by 1e-6 to 4e-5
// (the default float32 pass: about 0.1%). The stories-generated rows run with ORKPIPE_LONG_TESTS=1.
func TestHybridPerplexityGGML(t *testing.T) {
	for _, c := range []struct {
		file, text string
		ctx        int
		ppl        float64
		long       bool
	}{
		{"tiny-qwen35.gguf", "tinystories_sample.txt", 128, 3788.5008, false},
		{"tiny-qwen35-f16.gguf", "tinystories_sample.txt", 128, 3789.0301, false},
		{"tiny-qwen35-q8_0.gguf", "tinystories_sample.txt", 128, 3752.9928, false},
		{"tiny-lfm2moe.gguf", "tinystories_sample.txt", 128, 3624.7139, false},
		{"tiny-lfm2moe-f16.gguf", "tinystories_sample.txt", 128, 3635.0595, false},
		{"tiny-lfm2moe-q8_0.gguf", "tinystories_sample.txt", 128, 3606.6383, false},
		{"tiny-qwen35.gguf", "stories-generated.txt", 512, 3752.7765, true},
		{"tiny-qwen35-f16.gguf", "stories-generated.txt", 512, 3752.8346, true},
		{"tiny-qwen35-q8_0.gguf", "stories-generated.txt", 512, 3757.7132, true},
		{"tiny-lfm2moe.gguf", "stories-generated.txt", 512, 3577.3367, true},
		{"tiny-lfm2moe-f16.gguf", "stories-generated.txt", 512, 3581.0930, true},
		{"tiny-lfm2moe-q8_0.gguf", "stories-generated.txt", 512, 3593.3884, true},
		{"tiny-qwen35.gguf", "stories-generated.txt", 128, 3785.1471, true},
		{"tiny-qwen35-f16.gguf", "stories-generated.txt", 128, 3785.5675, true},
		{"tiny-qwen35-q8_0.gguf", "stories-generated.txt", 128, 3786.5928, true},
		{"tiny-lfm2moe.gguf", "stories-generated.txt", 128, 3656.8433, true},
		{"tiny-lfm2moe-f16.gguf", "stories-generated.txt", 128, 3662.6876, true},
		{"tiny-lfm2moe-q8_0.gguf", "stories-generated.txt", 128, 3681.3353, true},
	} {
		t.Run(c.file+"/"+c.text, func(t *testing.T) {
			if c.long {
				testfiles.Long(t, "a stories-generated row")
			}
			m, ids, bos := openWithText(t, c.file, c.text)
			m.Src.(*GGUFSource).GGMLExact = true
			m.GGMLExact = true
			res, err := Evaluate(context.Background(), m, ids, EvalOptions{Ctx: c.ctx, BOS: bos})
			if err != nil {
				t.Fatal(err)
			}
			rel := res.PPL/c.ppl - 1
			t.Logf("ctx %d: PPL %.4f +/- %.5f (llama.cpp %.4f, relative difference %.2e)", c.ctx, res.PPL, res.PPLErr, c.ppl, rel)
			if math.Abs(rel) > 1e-4 {
				t.Errorf("PPL %.4f differs from llama.cpp's %.4f by %.2e relative (want <= 1e-4)", res.PPL, c.ppl, rel)
			}
		})
	}
}

// TestPerplexityUbatch checks llama-perplexity's batching of chunks into ubatches (-b 2048 -ub 512).
func TestPerplexityUbatch(t *testing.T) {
	for _, c := range []struct{ ctx, chunk, chunks, want int }{
		{128, 0, 14, 36},    // 14 chunks in one decode: 512/14 tokens of each
		{128, 0, 157, 32},   // 16 per decode
		{128, 156, 157, 39}, // the last decode holds 13
		{512, 0, 39, 128},   // 4 per decode
		{512, 38, 39, 170},  // the last decode holds 3
		{2048, 5, 8, 512},   // one sequence per decode
		{4096, 0, 4, 512},   // decodes of 2048 tokens, ubatches of 512
	} {
		if got := perplexityUbatch(c.ctx, c.chunk, c.chunks); got != c.want {
			t.Errorf("perplexityUbatch(%d, %d, %d) = %d, want %d", c.ctx, c.chunk, c.chunks, got, c.want)
		}
	}
}

// TestQuantizeQ8_0AVX2 checks the activation quantizer against what distinguishes it from
// quantize_row_q8_0_ref (quant.QuantizeQ8_0): ties round to even.
func TestQuantizeQ8_0AVX2(t *testing.T) {
	x := make([]float32, 32)
	x[0] = 127 // max|x| = 127: scale 1, id 1
	x[1], x[2], x[3] = 2.5, -3.5, 0.5
	r := q8Row{q: make([]int8, 32), d: make([]float32, 1)}
	quantizeQ8_0AVX2(r, x)
	if r.d[0] != 1 || r.q[0] != 127 || r.q[1] != 2 || r.q[2] != -4 || r.q[3] != 0 {
		t.Errorf("codes %v scale %v, want 127 2 -4 0 (ties to even) and 1", r.q[:4], r.d[0])
	}
	ref := make([]byte, 34)
	if err := quant.QuantizeQ8_0(ref, x); err != nil {
		t.Fatal(err)
	}
	if int8(ref[2+1]) != 3 {
		t.Errorf("reference quantizer: 2.5 -> %d, want 3 (ties away from zero; the test assumes the two differ)", int8(ref[3]))
	}
}

// TestGGMLDotOrder checks that the dot products sum in ggml's lane order, where float32 addition is not
// associative: a sequential sum loses both ones next to 2^24, the lanes keep them.
func TestGGMLDotOrder(t *testing.T) {
	w := make([]float32, 32)
	x := make([]float32, 32)
	for i := range w {
		w[i] = 1
	}
	x[0], x[2], x[6] = 1<<24, 1, 1
	if got, want := dotTiny(w, x), float32(1<<24+2); got != want {
		t.Errorf("dotTiny = %v, want %v (lanes 2 and 6 summed before lane 0)", got, want)
	}
	if got, want := dotVecF32(w, x), float32(1<<24+2); got != want {
		t.Errorf("dotVecF32 = %v, want %v", got, want)
	}
	var seq float32
	for i := range w {
		seq += w[i] * x[i]
	}
	if seq != 1<<24 {
		t.Fatalf("sequential sum %v: the test assumes it loses the ones", seq)
	}
	// the tail of ggml_vec_dot_f32 (16 values): in order, so the ones are lost there
	if got := dotVecF32(w[:16], x[:16]); got != 1<<24 {
		t.Errorf("dotVecF32 of 16 values = %v, want %v (summed in order)", got, float32(1<<24))
	}
	// Q8_0: integer block sums, then lanes
	wq := q8Row{q: make([]int8, 64), d: []float32{0.5, 0.25}}
	xq := q8Row{q: make([]int8, 64), d: []float32{2, 4}}
	var want float64
	for i := range wq.q {
		wq.q[i], xq.q[i] = int8(i%7-3), int8(i%5-2)
		want += float64(wq.q[i]) * float64(xq.q[i]) * float64(wq.d[i/32]*xq.d[i/32])
	}
	if got := dotQ8_0(wq, xq); float64(got) != want {
		t.Errorf("dotQ8_0 = %v, want %v (exact for small integers)", got, want)
	}
}

// TestFlashAttentionGGML checks both kernel paths against float32 softmax attention: close to it, and
// different from each other (the short-ubatch path accumulates in binary16).
func TestFlashAttentionGGML(t *testing.T) {
	const tokens, heads, kvHeads, hd = 100, 4, 2, 16
	q, k, v := randomQKV(rand.New(rand.NewPCG(3, 4)), tokens, heads, kvHeads, hd, 1)
	ref := make([]float32, len(q))
	attention(ref, make([]float32, attentionScratch(heads, tokens)), q, k, v, tokens, heads, kvHeads, hd)
	tiled, short := make([]float32, len(q)), make([]float32, len(q))
	flashAttentionGGML(tiled, q, k, v, tokens, heads, kvHeads, hd, 0)
	flashAttentionGGML(short, q, k, v, tokens, heads, kvHeads, hd, 32) // ubatches of 32 < 64 rows
	var dTiled, dShort, dPaths float64
	for i := range ref {
		dTiled = max(dTiled, math.Abs(float64(tiled[i]-ref[i])))
		dShort = max(dShort, math.Abs(float64(short[i]-ref[i])))
		dPaths = max(dPaths, math.Abs(float64(short[i]-tiled[i])))
	}
	if dTiled > 1e-5 || dShort > 5e-3 {
		t.Errorf("largest difference from float32 attention: tiled %.2g (want <= 1e-5), one-chunk %.2g (want <= 5e-3)", dTiled, dShort)
	}
	if dPaths == 0 {
		t.Error("the two kernel paths agree bit for bit: the binary16 accumulator is not emulated")
	}
}

// TestGGMLExactWeightTypes checks the ggml-exact source: Q8_0 products close to the float32 ones of the
// dequantized weight, and a clear error for a type it does not implement.
func TestGGMLExactWeightTypes(t *testing.T) {
	ctx := context.Background()
	f, err := gguf.Open(ctx, testfiles.Path(t, "tiny-qwen35-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exact, plain := NewGGUFSource(f, 0), NewGGUFSource(f, 0)
	exact.GGMLExact = true
	for _, name := range []string{"blk.0.attn_qkv.weight", "blk.0.ssm_alpha.weight"} {
		le, _, err := exact.Linear(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		lp, _, err := plain.Linear(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		n, k := le.Dims()
		x := make([]float32, 3*k)
		for i := range x {
			x[i] = float32(math.Sin(float64(i)))
		}
		ye, yp := make([]float32, 3*n), make([]float32, 3*n)
		if err := le.Apply(ye, x); err != nil {
			t.Fatal(err)
		}
		if err := lp.Apply(yp, x); err != nil {
			t.Fatal(err)
		}
		var scale, diff float64
		for i := range ye {
			scale = max(scale, math.Abs(float64(yp[i])))
			diff = max(diff, math.Abs(float64(ye[i]-yp[i])))
		}
		if diff > 0.02*scale || diff == 0 {
			t.Errorf("%s: ggml-exact products differ from float32 ones by %.3g (largest output %.3g): want Q8_0 activation rounding, nothing more", name, diff, scale)
		}
	}
	q4, err := gguf.Open(ctx, testfiles.Path(t, "stories260K-Q4_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer q4.Close()
	src := NewGGUFSource(q4, 0)
	src.GGMLExact = true
	if _, _, err := src.Linear(ctx, "blk.0.attn_q.weight"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Q4_0 weight with GGMLExact: error %v, want ErrUnsupported", err)
	}
}
