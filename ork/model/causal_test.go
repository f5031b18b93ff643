package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// gonumAttention is gemmAttention with gonum's Sgemm named explicitly (under -tags blas blas32 is
// OpenBLAS): the arithmetic causalAttention must reproduce.
func gonumAttention(out, q, k, v []float32, t, heads, kvHeads, hd int) {
	qd, kvd := heads*hd, kvHeads*hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	s := make([]float32, t*t)
	for h := range heads {
		kh := h / (heads / kvHeads)
		gonum.Implementation{}.Sgemm(blas.NoTrans, blas.Trans, t, t, hd, scale, q[h*hd:], qd, k[kh*hd:], kvd, 0, s, t)
		causalSoftmax(s, t)
		gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, t, hd, t, 1, s, t, v[kh*hd:], kvd, 0, out[h*hd:], qd)
	}
}

// TestCausalAttentionMatchesSgemm checks causalAttention bit for bit against the whole-matrix products
// under gonum's Sgemm: token counts on both sides of Sgemm's parallel threshold (64) and of the work
// items' rows, head sizes below, at and above gonum's 64-value K slices, grouped and plain heads, every
// alignment of the key rows (gonum's dot trims to a 16-byte boundary of them), 1 to 3 goroutines, and
// scores that underflow to exact zeros in the softmax.
func TestCausalAttentionMatchesSgemm(t *testing.T) {
	cases := []struct{ tokens, heads, kvHeads, hd int }{
		{1, 2, 1, 8}, {5, 4, 2, 8}, {64, 2, 2, 12}, {65, 4, 1, 8}, {100, 2, 1, 64},
		{130, 3, 3, 72}, {129, 2, 1, 256}, {200, 8, 4, 8}, {64, 2, 1, 130},
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range cases {
		for _, procs := range []int{1, 2, 3} {
			for off := range 4 {
				name := fmt.Sprintf("t%d_h%d_kv%d_hd%d_procs%d_off%d", c.tokens, c.heads, c.kvHeads, c.hd, procs, off)
				t.Run(name, func(t *testing.T) {
					qd, kvd := c.heads*c.hd, c.kvHeads*c.hd
					spread := 1.0
					if off == 3 {
						spread = 40 // scores far apart: exp underflows to 0 for most keys
					}
					gen := func(n int) []float32 {
						s := make([]float32, n+off)[off:]
						for i := range s {
							s[i] = float32(rng.NormFloat64() * spread)
						}
						return s
					}
					q, k, v := gen(c.tokens*qd), gen(c.tokens*kvd), gen(c.tokens*kvd)
					want := make([]float32, c.tokens*qd)
					gonumAttention(want, q, k, v, c.tokens, c.heads, c.kvHeads, c.hd)
					prev := runtime.GOMAXPROCS(procs)
					defer runtime.GOMAXPROCS(prev)
					got := make([]float32, c.tokens*qd)
					for i := range got {
						got[i] = float32(math.NaN()) // every output must be written
					}
					scratch := make([]float32, causalScratch(c.heads, c.tokens))
					causalAttention(got, scratch, q, k, v, c.tokens, c.heads, c.kvHeads, c.hd)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("out[%d] (token %d, value %d) = %v (%#x), Sgemm's %v (%#x)", i, i/qd, i%qd,
								got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				})
			}
		}
	}
}

// BenchmarkAttention compares causalAttention with gemmAttention (the whole-matrix products; gonum's
// in the pure-Go build) on one sequence: stories260K's heads and Qwen3.6-27B's full-attention heads.
func BenchmarkAttention(b *testing.B) {
	for _, c := range []struct {
		name                       string
		tokens, heads, kvHeads, hd int
	}{{"stories260K", 512, 8, 4, 8}, {"qwen35-27B", 512, 24, 4, 256}} {
		rng := rand.New(rand.NewPCG(1, 2))
		gen := func(n int) []float32 {
			s := make([]float32, n)
			for i := range s {
				s[i] = float32(rng.NormFloat64())
			}
			return s
		}
		q, k, v := gen(c.tokens*c.heads*c.hd), gen(c.tokens*c.kvHeads*c.hd), gen(c.tokens*c.kvHeads*c.hd)
		out := make([]float32, len(q))
		b.Run(c.name+"/gemm", func(b *testing.B) {
			s := make([]float32, attentionWorkers(c.heads)*c.tokens*c.tokens)
			for b.Loop() {
				gemmAttention(out, s, q, k, v, c.tokens, c.heads, c.kvHeads, c.hd)
			}
		})
		b.Run(c.name+"/causal", func(b *testing.B) {
			s := make([]float32, causalScratch(c.heads, c.tokens))
			for b.Loop() {
				causalAttention(out, s, q, k, v, c.tokens, c.heads, c.kvHeads, c.hd)
			}
		})
	}
}
