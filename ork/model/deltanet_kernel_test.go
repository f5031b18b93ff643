package model

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/model/internal/deltanet"
)

// TestGatedDeltaRuleKernel runs gatedDeltaRule with deltanet's kernel and with the Go loops (the
// path of CPUs without AVX2) over the same sequences and compares every output bit for bit: head
// dims that take the kernel and one that does not, several key heads, values with zeros.
func TestGatedDeltaRuleKernel(t *testing.T) {
	if !deltanet.Available {
		testfiles.SkipCPU(t, "no AVX2: gatedDeltaRule runs its Go loops only")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []SSMShape{{HeadDim: 16, KHeads: 1, VHeads: 2}, {HeadDim: 128, KHeads: 2, VHeads: 6}, {HeadDim: 64, KHeads: 4, VHeads: 4}, {HeadDim: 24, KHeads: 1, VHeads: 1}} {
		const tokens = 9
		cd, vd, vh, hd := sh.ConvDim(), sh.ValueDim(), sh.VHeads, sh.HeadDim
		u := make([]float32, tokens*cd)
		for i := range u {
			if r.IntN(15) > 0 {
				u[i] = float32(r.NormFloat64() * 0.3)
			}
		}
		g, beta := make([]float32, tokens*vh), make([]float32, tokens*vh)
		for i := range g {
			g[i], beta[i] = -float32(r.Float64()), float32(r.Float64())
		}
		run := func(kernel bool) []float32 {
			prev := deltanet.Available
			deltanet.Available = kernel
			defer func() { deltanet.Available = prev }()
			o := make([]float32, tokens*vd)
			gatedDeltaRule(o, u, g, beta, sh, make([]float32, parallel.Workers(vh)*(hd*hd+hd)), false)
			return o
		}
		want, got := run(false), run(true)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%+v: o[%d] = %v with the kernel, %v without", sh, i, got[i], want[i])
			}
		}
	}
}

// TestCausalConvParallel: causalConv on three goroutines (channels shared out) gives, bit for bit,
// the values of one pass over every channel, with and without silu, on ggml's path and not.
func TestCausalConvParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const ch, k, rows = 300, 4, 64 // 8·rows·ch values of work: enough to be shared out
	w := make([]float32, ch*k)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	u0 := make([]float32, rows*ch)
	for i := range u0 {
		u0[i] = float32(r.NormFloat64())
	}
	prev := runtime.GOMAXPROCS(3)
	defer runtime.GOMAXPROCS(prev)
	for _, silu := range []bool{false, true} {
		for _, ggml := range []bool{false, true} {
			want := append([]float32(nil), u0...)
			causalConvChannels(want, w, ch, k, rows, 0, ch, silu, ggml)
			got := append([]float32(nil), u0...)
			causalConv(got, w, ch, k, silu, ggml)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("silu %v ggml %v: value %d = %v, one pass %v", silu, ggml, i, got[i], want[i])
				}
			}
		}
	}
}
