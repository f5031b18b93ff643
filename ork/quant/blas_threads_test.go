//go:build blas

package quant

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"orkpipe/internal/testfiles"
)

// TestGPTQFactorOnFixedThreads: GPTQ's factorisation of H⁻¹ gives the same bits whether or not a
// GPTQ row phase in another node has made OpenBLAS single-threaded meanwhile (OpenBLAS's dpotrf and
// dtrtri give other bits on another thread count, so the factor would depend on the scheduling).
func TestGPTQFactorOnFixedThreads(t *testing.T) {
	if BLASThreads() < 2 {
		testfiles.Need(t, "OpenBLAS runs on %d thread here: the factor cannot depend on the count (it needs 2 cores or more, and OPENBLAS_NUM_THREADS unset or 2 or more)", BLASThreads())
	}
	const k = 1024
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, 64*k)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	a := make([]float64, k*k)
	for i := 0; i < k; i++ {
		for j := 0; j < k; j++ {
			s := 0.0
			for l := 0; l < 64; l++ {
				s += x[l*k+i] * x[l*k+j]
			}
			a[i*k+j] = s
		}
		a[i*k+i] += k
	}
	factor := func() []float64 {
		b := slices.Clone(a)
		if err := invCholUpper(context.Background(), b, k); err != nil {
			t.Fatal(err)
		}
		return b
	}
	alone := factor()
	done := singleThreadedBLAS() // another node's row phase is running
	during := factor()
	done()
	if !slices.Equal(alone, during) {
		t.Fatal("the factor of H⁻¹ differs while OpenBLAS is single-threaded for another GPTQ's row phase")
	}
	if got := BLASThreads(); got < 2 {
		t.Fatalf("BLASThreads() = %d after a single-threaded scope, want the configured count", got)
	}
}
