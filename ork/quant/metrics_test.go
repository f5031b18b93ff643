package quant

import (
	"fmt"
	"math"
	"testing"
)

// TestTraceEHE: the panelled Σ H∘(EᵀE) equals tr(E·H·Eᵀ) summed term by term, for widths below,
// at and across the panel width (a short last panel included).
func TestTraceEHE(t *testing.T) {
	for _, tc := range []struct{ n, k int }{{1, 1}, {5, 37}, {3, errorPanel}, {64, errorPanel + 44}, {7, 2*errorPanel + 101}} {
		t.Run(fmt.Sprintf("n%d-k%d", tc.n, tc.k), func(t *testing.T) {
			em := randMatrix("e", tc.n, tc.k, uint64(tc.k))
			x, err := CorrelatedActivations(2*tc.k, tc.k, 3)
			if err != nil {
				t.Fatal(err)
			}
			h := NewHessian(tc.k)
			if err := h.Add(x.Data, x.Rows); err != nil {
				t.Fatal(err)
			}
			e := make([]float64, len(em.Data))
			et := make([]float64, len(em.Data))
			for i, v := range em.Data {
				e[i] = float64(v)
				et[i%tc.k*tc.n+i/tc.k] = float64(v)
			}
			want := 0.0
			for r := 0; r < tc.n; r++ {
				row := e[r*tc.k : (r+1)*tc.k]
				for i, a := range row {
					s := 0.0
					for j, b := range row {
						s += h.Data[i*tc.k+j] * b
					}
					want += a * s
				}
			}
			got := traceEHE(et, tc.n, tc.k, h.Data)
			if math.Abs(got-want) > 1e-12*math.Abs(want) || want <= 0 {
				t.Errorf("traceEHE = %.17g, term by term %.17g", got, want)
			}
		})
	}
}

// BenchmarkTraceEHE is traceEHE on a 4096 x 4096 error and Hessian (n·k² flops, GFLOP/s reported).
func BenchmarkTraceEHE(b *testing.B) {
	const n, k = 4096, 4096
	em := randMatrix("e", n, k, 1)
	e := make([]float64, n*k)
	for i, v := range em.Data {
		e[i] = float64(v)
	}
	h := make([]float64, k*k)
	for i := 0; i < k; i++ {
		for j := 0; j <= i; j++ {
			v := float64(em.Data[(i*k+j)%len(em.Data)])
			h[i*k+j], h[j*k+i] = v, v
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		traceEHE(e, n, k, h) // e as Eᵀ: the same work
	}
	b.ReportMetric(float64(n)*k*k/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
}
