package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/ork/internal/parallel"
)

// BenchmarkGatedDeltaRule is one Gated DeltaNet layer's recurrence over 128 tokens at Qwen3.6-27B's
// widths (16 key heads, 48 value heads of 128): the float32 pass (its AVX2/AVX-512 step kernel where
// the CPU has one) and the ggml-exact pass (ggml_gated_delta_net's dot products and FMAs).
func BenchmarkGatedDeltaRule(b *testing.B) {
	sh := SSMShape{ConvKernel: 4, HeadDim: 128, KHeads: 16, VHeads: 48}
	u, g, beta := randomDeltaInputs(rand.New(rand.NewPCG(25, 26)), sh, 128, 0.1)
	o := make([]float32, 128*sh.ValueDim())
	work := make([]float32, parallel.Workers(sh.VHeads)*(sh.HeadDim*sh.HeadDim+sh.HeadDim))
	for _, ggml := range []bool{false, true} {
		b.Run(fmt.Sprintf("ggml=%v", ggml), func(b *testing.B) {
			for b.Loop() {
				gatedDeltaRule(o, u, g, beta, sh, work, ggml)
			}
		})
	}
}

// TestGatedDeltaRuleGGMLMatchesPerValue holds the ggml-exact recurrence (its state update in
// fma.AxpyRows) to the per-value FMAs it replaced, bit for bit, at head widths with and without a tail
// of eights.
func TestGatedDeltaRuleGGMLMatchesPerValue(t *testing.T) {
	for _, sh := range []SSMShape{{ConvKernel: 4, HeadDim: 16, KHeads: 2, VHeads: 4}, {ConvKernel: 4, HeadDim: 36, KHeads: 1, VHeads: 2}, {ConvKernel: 4, HeadDim: 128, KHeads: 2, VHeads: 2}} {
		const tokens = 40
		u, g, beta := randomDeltaInputs(rand.New(rand.NewPCG(27, 28)), sh, tokens, 0.3)
		got, want := make([]float32, tokens*sh.ValueDim()), make([]float32, tokens*sh.ValueDim())
		gatedDeltaRule(got, u, g, beta, sh, make([]float32, parallel.Workers(sh.VHeads)*(sh.HeadDim*sh.HeadDim+sh.HeadDim)), true)
		gatedDeltaRuleGGMLRef(want, u, g, beta, sh)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: out[%d] = %v, the per-value FMAs %v", sh, i, got[i], want[i])
			}
		}
	}
}

// randomDeltaInputs returns the recurrence's inputs for tokens rows of shape sh: the convolved q|k|v
// normal times sd, the log-decays g in (-1, 0] and the betas in [0, 1).
func randomDeltaInputs(rng *rand.Rand, sh SSMShape, tokens int, sd float64) (u, g, beta []float32) {
	u, g, beta = make([]float32, tokens*sh.ConvDim()), make([]float32, tokens*sh.VHeads), make([]float32, tokens*sh.VHeads)
	for i := range u {
		u[i] = float32(rng.NormFloat64() * sd)
	}
	for i := range g {
		g[i], beta[i] = float32(-rng.Float64()), float32(rng.Float64())
	}
	return u, g, beta
}

// gatedDeltaRuleGGMLRef is gatedDeltaRule's ggml-exact pass as it was computed value by value
// (session 58), one head at a time: the reference for its kernel.
func gatedDeltaRuleGGMLRef(o, u, g, beta []float32, sh SSMShape) {
	cd, kd, vd, vh, hd := sh.ConvDim(), sh.KeyDim(), sh.ValueDim(), sh.VHeads, sh.HeadDim
	t := len(g) / vh
	scale := 1 / float32(math.Sqrt(float64(hd)))
	state, delta := make([]float32, hd*hd), make([]float32, hd)
	for j := range vh {
		kh := j % sh.KHeads
		clear(state)
		for tt := range t {
			row := u[tt*cd:]
			q, k, v := row[kh*hd:(kh+1)*hd], row[kd+kh*hd:kd+(kh+1)*hd], row[2*kd+j*hd:2*kd+(j+1)*hd]
			decay := float32(math.Exp(float64(g[tt*vh+j])))
			for i := range state {
				state[i] *= decay
			}
			for jj := range hd {
				delta[jj] = (v[jj] - dotVecF32(state[jj*hd:(jj+1)*hd], k)) * beta[tt*vh+j]
			}
			for jj, dj := range delta {
				sr := state[jj*hd : (jj+1)*hd]
				for i, kv := range k {
					sr[i] = fma32(kv, dj, sr[i])
				}
			}
			out := o[tt*vd+j*hd : tt*vd+(j+1)*hd]
			for jj := range out {
				out[jj] = dotVecF32(state[jj*hd:(jj+1)*hd], q) * scale
			}
		}
	}
}
