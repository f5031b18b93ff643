package fma

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"orkpipe/internal/testfiles"
)

// TestExpf checks ggml_v_expf's emulation: within 2 ulp of exp, exactly 1 at 0, 0 far below.
func TestExpf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		x := float32(rng.Float64()*170 - 85)
		got, want := Expf(x), math.Exp(float64(x))
		if ulp := math.Abs(float64(got)-want) / float64(math.Nextafter32(float32(want), float32(math.Inf(1)))-float32(want)); ulp > 2 {
			t.Fatalf("Expf(%v) = %v, exp = %v (%.1f ulp)", x, got, want, ulp)
		}
	}
	if Expf(0) != 1 || Expf(float32(math.Inf(-1))) != 0 || Expf(-200) != 0 {
		t.Errorf("Expf(0, -inf, -200) = %v %v %v, want 1 0 0", Expf(0), Expf(float32(math.Inf(-1))), Expf(-200))
	}
}

// TestSiLUKernel checks silu against SiLU's Go loop (Expf's lanes) bit for bit, with and without the
// gate: arguments over Expf's whole range and past it (|n| beyond 126 and 192 in a lane of a group
// whose other lanes are ordinary, so that both of the kernel's blends are taken), zeros of both signs,
// infinities and NaNs (NaN-ness only), in place and not.
func TestSiLUKernel(t *testing.T) {
	if !available {
		testfiles.SkipCPU(t, "no AVX2 and FMA: SiLU runs in Go")
	}
	r := rand.New(rand.NewPCG(17, 18))
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		87.5, -87.5, 88.8, -88.8, 103.9, -103.9, 130, -130, 150, -150, 200, -200, 1e30, -1e30, 3e-39, -3e-39}
	for n := 8; n <= 1024; n *= 2 {
		for _, mode := range []string{"normal", "wide", "specials"} {
			x, g := make([]float32, n), make([]float32, n+3)
			for i := range x {
				switch mode {
				case "normal":
					x[i] = float32(r.NormFloat64() * 4)
				case "wide":
					x[i] = float32(r.Float64()*440 - 220)
				default:
					x[i] = float32(r.NormFloat64())
					if r.IntN(3) == 0 {
						x[i] = specials[r.IntN(len(specials))]
					}
				}
				g[i] = float32(r.NormFloat64())
			}
			for _, gate := range [][]float32{nil, g} {
				var out [2][]float32
				withKernels(t, func(kernel bool) {
					y := make([]float32, n)
					SiLU(y, x, gate)
					out[b2i(kernel)] = y
				})
				what := fmt.Sprintf("SiLU n %d %s gate %v", n, mode, gate != nil)
				same(t, what, out[1], out[0])
				inPlace := append([]float32(nil), x...)
				SiLU(inPlace, inPlace, gate)
				same(t, what+" in place", inPlace, out[1])
			}
		}
	}
}

// TestSiLUSweep compares silu with SiLU's Go loop on a grid of 2^20 arguments over [-104, 90): the
// polynomial's products are small against its sums, so a kernel that rounds one of them apart from its
// sum differs from ggml on few arguments (TestSiLUExhaustive takes all of them).
func TestSiLUSweep(t *testing.T) {
	if !available {
		testfiles.SkipCPU(t, "no AVX2 and FMA: SiLU runs in Go")
	}
	x := make([]float32, 1<<20)
	for i := range x {
		x[i] = float32(-104 + 194*float64(i)/float64(len(x)))
	}
	var out [2][]float32
	withKernels(t, func(kernel bool) {
		y := make([]float32, len(x))
		SiLU(y, x, nil)
		out[b2i(kernel)] = y
	})
	same(t, "SiLU on the grid", out[1], out[0])
}

// TestSiLUExhaustive compares silu with SiLU's Go loop over every float32 argument (bit pattern).
func TestSiLUExhaustive(t *testing.T) {
	testfiles.Long(t, "every float32 argument, a few minutes")
	if !available {
		testfiles.SkipCPU(t, "no AVX2 and FMA: SiLU runs in Go")
	}
	x, got, want := make([]float32, 1<<20), make([]float32, 1<<20), make([]float32, 1<<20)
	for hi := uint64(0); hi < 1<<32; hi += 1 << 20 {
		for i := range x {
			x[i] = math.Float32frombits(uint32(hi) + uint32(i))
		}
		silu(&got[0], &x[0], nil, len(x))
		for i, v := range x {
			want[i] = v / (1 + Expf(0-v))
		}
		same(t, fmt.Sprintf("SiLU of the patterns from %#x", hi), got, want)
	}
}
