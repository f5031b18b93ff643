package sgemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// gonumNN is NN's reference: gonum's own Sgemm(NoTrans, NoTrans, 1, A, B, 0, C).
func gonumNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(blas.NoTrans, blas.NoTrans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
}

// TestNNMatchesGonum checks NN against gonum's Sgemm(NoTrans, NoTrans) bit for bit, NaN payloads
// included on amd64 (elsewhere NN's Saxpy calls and gonum's own loop keep different NaNs where two
// meet, as on arm64 under qemu-aarch64: a NaN's payload is then not compared): columns within one register, across four and past 64 (masked tails at every width), K
// from 0 up, strides wider than the rows, B off its 16-byte boundaries, A with zeros of both signs
// (which are skipped: a zero times an infinity of B would give NaN), infinities and NaNs in A and B,
// and C holding values before the call (beta 0 overwrites them), on every path this CPU has (nn16 and
// nn64 on AVX-512, gonum's axpy loop without).
func TestNNMatchesGonum(t *testing.T) {
	nanAnyPayload := runtime.GOARCH != "amd64"
	r := rand.New(rand.NewPCG(13, 14))
	// special puts infinities (and, with nans, NaNs) among v's values, one in rate.
	special := func(v []float32, rate int, nans bool) []float32 {
		for i := range v {
			switch r.IntN(rate) {
			case 0:
				v[i] = float32(math.Inf(1 - 2*r.IntN(2)))
			case 1:
				if nans {
					v[i] = math.Float32frombits(0x7fc00000 | uint32(r.IntN(1<<22)) | uint32(r.IntN(2))<<31)
				}
			}
		}
		return v
	}
	shapes := [][3]int{{1, 1, 1}, {1, 8, 0}, {2, 8, 5}, {3, 16, 64}, {1, 17, 9}, {4, 33, 100}, {2, 64, 130},
		{1, 65, 3}, {3, 100, 77}, {2, 256, 512}, {1, 255, 40}}
	for _, s := range shapes {
		for _, extra := range []int{0, 3} {
			for _, mode := range []string{"finite", "inf", "nan"} {
				m, n, k := s[0], s[1], s[2]
				lda, ldb, ldc := max(1, k)+extra, n+extra, n+extra
				name := fmt.Sprintf("m%d_n%d_k%d_extra%d_%s", m, n, k, extra, mode)
				t.Run(name, func(t *testing.T) {
					a := values(r, max(0, (m-1)*lda+k))
					b := values(r, max(0, (k-1)*ldb+n)+extra)[extra:]
					if mode != "finite" {
						a, b = special(a, 30, mode == "nan"), special(b, 30, mode == "nan")
					}
					c0 := values(r, (m-1)*ldc+n)
					want := append([]float32(nil), c0...)
					gonumNN(m, n, k, a, lda, b, ldb, want, ldc)
					forKernels(t, func(kernels string) {
						got := append([]float32(nil), c0...)
						NN(m, n, k, a, lda, b, ldb, got, ldc)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(nanAnyPayload && isNaN32(got[i]) && isNaN32(want[i])) {
								t.Fatalf("%s: c[%d] (row %d, column %d) = %v (%#x), gonum %v (%#x)", kernels, i, i/ldc, i%ldc,
									got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
							}
						}
					})
				})
			}
		}
	}
}

// isNaN32 reports whether v is a NaN.
func isNaN32(v float32) bool { return v != v }

// TestNNPanics checks that NN refuses what gonum's Sgemm refuses: short slices and strides.
func TestNNPanics(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"short lda", func() { NN(2, 4, 8, make([]float32, 16), 7, make([]float32, 32), 4, make([]float32, 8), 4) }},
		{"short ldb", func() { NN(2, 4, 8, make([]float32, 16), 8, make([]float32, 32), 3, make([]float32, 8), 4) }},
		{"short A", func() { NN(2, 4, 8, make([]float32, 15), 8, make([]float32, 32), 4, make([]float32, 8), 4) }},
		{"short B", func() { NN(2, 4, 8, make([]float32, 16), 8, make([]float32, 31), 4, make([]float32, 8), 4) }},
		{"short C", func() { NN(2, 4, 8, make([]float32, 16), 8, make([]float32, 32), 4, make([]float32, 7), 4) }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", c.name)
				}
			}()
			c.f()
		}()
	}
}

// BenchmarkNN is attention's second product for one query row (its probabilities over 512 positions
// times the values of a head 8, 128 and 256 wide) on each kernel set this CPU has, and gonum's Sgemm.
func BenchmarkNN(b *testing.B) {
	r := rand.New(rand.NewPCG(17, 18))
	const k = 512
	for _, n := range []int{8, 128, 256} {
		a, v, c := values(r, k), values(r, k*n), make([]float32, n)
		b.Run(fmt.Sprintf("n%d/gonum", n), func(b *testing.B) {
			for b.Loop() {
				gonumNN(1, n, k, a, k, v, n, c, n)
			}
		})
		forKernels(b, func(kernels string) {
			b.Run(fmt.Sprintf("n%d/%s", n, kernels), func(b *testing.B) {
				for b.Loop() {
					NN(1, n, k, a, k, v, n, c, n)
				}
			})
		})
	}
}
