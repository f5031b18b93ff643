package deltanet

import (
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/internal/testfiles"
)

// TestStepMatchesGo runs Step and StepGo over a sequence of tokens from the same state, head dims
// 16 to 256, values over several magnitudes with zeros and negative zeros among them, decays and
// betas in (0, 1], and compares every output and the state bit for bit after each token: with the
// AVX2 kernel, and with the AVX-512 one where the CPU has it.
func TestStepMatchesGo(t *testing.T) {
	if !Available {
		testfiles.SkipCPU(t, "no AVX2: Step has no kernel on this CPU (callers run their own code)")
	}
	prev := wide
	defer func() { wide = prev }()
	for _, w := range []bool{false, true} {
		if w && !prev {
			t.Log("no AVX-512: step16 not run")
			continue
		}
		wide = w
		stepMatchesGo(t)
	}
}

func stepMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	val := func() float32 {
		switch r.IntN(20) {
		case 0:
			return 0
		case 1:
			return float32(math.Copysign(0, -1))
		}
		return float32(r.NormFloat64() * math.Exp2(float64(r.IntN(10)-5)))
	}
	for _, hd := range []int{16, 32, 48, 128, 256} {
		st, ref := make([]float32, hd*hd), make([]float32, hd*hd)
		for i := range st {
			st[i] = val()
		}
		copy(ref, st)
		k, q, v := make([]float32, hd), make([]float32, hd), make([]float32, hd)
		out, want := make([]float32, hd), make([]float32, hd)
		for tok := range 6 {
			for i := range hd {
				k[i], q[i], v[i] = val(), val(), val()
			}
			decay, beta, scale := float32(math.Exp(-r.Float64()*2)), float32(r.Float64()), 1/float32(math.Sqrt(float64(hd)))
			Step(st, hd, k, q, v, decay, beta, scale, out)
			StepGo(ref, hd, k, q, v, decay, beta, scale, want)
			for i := range want {
				if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
					t.Fatalf("wide %v hd %d token %d: out[%d] = %v, Go %v", wide, hd, tok, i, out[i], want[i])
				}
			}
			for i := range ref {
				if math.Float32bits(st[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("wide %v hd %d token %d: state[%d] = %v, Go %v", wide, hd, tok, i, st[i], ref[i])
				}
			}
		}
	}
}

// BenchmarkStep times one token of a 128-wide head (Qwen3.6-27B's): the kernels, then StepGo.
func BenchmarkStep(b *testing.B) {
	const hd = 128
	st := make([]float32, hd*hd)
	k, q, v, out := make([]float32, hd), make([]float32, hd), make([]float32, hd), make([]float32, hd)
	for i := range k {
		k[i], q[i], v[i] = 0.01*float32(i%7), 0.02*float32(i%5), 0.03*float32(i%3)
	}
	prev := wide
	defer func() { wide = prev }()
	for _, w := range []bool{true, false} {
		if !Available || w && !prev {
			continue
		}
		name := map[bool]string{true: "avx512", false: "avx2"}[w]
		b.Run(name, func(b *testing.B) {
			wide = w
			for b.Loop() {
				Step(st, hd, k, q, v, 0.99, 0.5, 0.1, out)
			}
		})
	}
	b.Run("go", func(b *testing.B) {
		for b.Loop() {
			StepGo(st, hd, k, q, v, 0.99, 0.5, 0.1, out)
		}
	})
}
