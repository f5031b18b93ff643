package quant

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"orkpipe/ork/internal/sgemm"
)

// TestSeedScoreMatchesHessianError: the search's float32 score of an RTN trial equals HessianError's
// float64 value to float32 rounding, for rotations that pad K or not, row counts below, at and
// across errorRows and widths across errorPanel, on 1 and 3 workers, with a correlated Hessian
// (large off-diagonal terms) and outlier channels. The scorer's buffers are reused from trial to
// trial, as the search reuses them.
func TestSeedScoreMatchesHessianError(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ n, k, block int }{{3, 96, 32}, {errorRows, 100, 32}, {errorRows + 9, errorPanel + 44, 64}, {130, 2*errorPanel + 64, 256}} {
		w := randMatrix("w", tc.n, tc.k, uint64(tc.k))
		for r := 0; r < tc.n; r++ {
			w.Data[r*tc.k+3] *= 9
		}
		h := correlatedHessian(t, map[int]*Hessian{}, tc.k)
		for _, workers := range []int{1, 3} {
			t.Run(fmt.Sprintf("n%d-k%d-b%d-w%d", tc.n, tc.k, tc.block, workers), func(t *testing.T) {
				sc := newSeedScorer(w, h.Data, workers)
				for seed := range uint64(3) {
					q, err := RTN(ctx, w, h, WithRotation(true, seed), WithRotationMinBlock(tc.block))
					if err != nil {
						t.Fatal(err)
					}
					want, err := HessianError(w, q, h)
					if err != nil {
						t.Fatal(err)
					}
					got, err := sc.score(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					rel := math.Abs(got-want) / want
					if !(rel < 1e-6) {
						t.Errorf("seed %d: score %.17g, HessianError %.17g (relative %.3g)", seed, got, want, rel)
					}
					t.Logf("seed %d: relative difference %.3g", seed, rel)
				}
			})
		}
	}
	w := randMatrix("w", 5, 64, 1)
	q, err := RTN(ctx, w, nil, WithGroup(32))
	if err != nil {
		t.Fatal(err)
	}
	h := NewHessian(64)
	if err := h.Add(randMatrix("a", 80, 64, 2).Data, 80); err != nil {
		t.Fatal(err)
	}
	want, err := HessianError(w, q, h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := newSeedScorer(w, h.Data, 2).score(ctx, q)
	if err != nil || math.Abs(got-want) > 1e-6*want {
		t.Errorf("unrotated: score %.17g (%v), HessianError %.17g", got, err, want)
	}
	if _, err := newSeedScorer(randMatrix("w", 5, 32, 1), h.Data[:32*32], 1).score(ctx, q); !errors.Is(err, ErrShape) {
		t.Errorf("a trial of another shape: %v, want ErrShape", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := newSeedScorer(w, h.Data, 2).score(cctx, q); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}

// TestRotationApplyRows: ApplyRows gives Apply's values bit for bit on any number of workers, and
// Apply's error for a bad shape.
func TestRotationApplyRows(t *testing.T) {
	r, err := NewRotationMinBlock(200, true, 7, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{1, 63, 64, 129, 300} {
		src := randMatrix("w", rows, 200, uint64(rows)).Data
		want := make([]float32, rows*r.Padded)
		if err := r.Apply(want, src, rows); err != nil {
			t.Fatal(err)
		}
		for _, workers := range []int{1, 2, 3, 8} {
			got := make([]float32, rows*r.Padded)
			if err := r.ApplyRows(got, src, rows, workers); err != nil || !slices.Equal(got, want) {
				t.Errorf("rows %d workers %d: ApplyRows differs from Apply (%v)", rows, workers, err)
			}
		}
	}
	if err := r.ApplyRows(make([]float32, 10), make([]float32, 200*300), 300, 4); !errors.Is(err, ErrShape) {
		t.Errorf("bad shape: %v, want ErrShape", err)
	}
}

// TestRotationSearchMemory: the scorer's Eᵀ is float32 N x K (half of the float64 Eᵀ of
// HessianError, which also held the dequantized and mapped-back rows), and the figure grows with
// the workers' row buffers.
func TestRotationSearchMemory(t *testing.T) {
	n, k, kp := 5120, 17408, 17408
	got := RotationSearchMemory(n, k, kp, 32, 256)
	if min := int64(n) * int64(k) * 4; got < min || got > min+int64(n)*int64(kp)*6+int64(k)*errorPanel*4+int64(runtime.GOMAXPROCS(0))*(errorRows*int64(kp+k+errorTile)*4+int64(kp)*8)+256*256*8+int64(kp)*8 {
		t.Errorf("RotationSearchMemory(%d, %d) = %d: outside what the search holds", n, k, got)
	}
}

// BenchmarkSeedScore is one trial's score at 4096 x 4096 (n·k² flops in the products, GFLOP/s
// reported): compare with BenchmarkTraceEHE, the float64 products alone.
func BenchmarkSeedScore(b *testing.B) {
	const n, k = 4096, 4096
	ctx := context.Background()
	w := randMatrix("w", n, k, 1)
	q, err := RTN(ctx, w, nil, WithRotation(true, 3))
	if err != nil {
		b.Fatal(err)
	}
	h := make([]float64, k*k)
	for i := 0; i < k; i++ {
		for j := 0; j <= i; j++ {
			v := float64(w.Data[(i*k+j)%len(w.Data)])
			h[i*k+j], h[j*k+i] = v, v
		}
	}
	sc := newSeedScorer(w, h, runtime.GOMAXPROCS(0))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := sc.score(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*k*k/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
}

// TestSeedScoreGonumBits: the search's products give gonum's Sgemm's bits whatever runs them — the
// pure-Go build's sgemm.NT (or OpenBLAS under -tags blas, where only rounding agrees) — so a seed's
// score, and the seed chosen, are what SearchVersion 3 always computed: the scorer's own products
// against one whose panels gonum's Sgemm forms, on widths across errorPanel, K not whole sixteens,
// rows across errorRows.
func TestSeedScoreGonumBits(t *testing.T) {
	gonumNT := func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
		gonum.Implementation{}.Sgemm(blas.NoTrans, blas.Trans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
	}
	ctx := context.Background()
	for _, tc := range []struct{ n, k int }{{5, 96}, {errorRows + 9, errorPanel + 44}, {130, 2*errorPanel + 72}, {70, 1100}} {
		w := randMatrix("w", tc.n, tc.k, uint64(tc.k)+7)
		h := correlatedHessian(t, map[int]*Hessian{}, tc.k)
		q, err := RTN(ctx, w, h, WithRotation(true, 5), WithRotationMinBlock(32))
		if err != nil {
			t.Fatal(err)
		}
		own, ref := newSeedScorer(w, h.Data, 2), newSeedScorer(w, h.Data, 2)
		ref.nt = gonumNT
		got, err := own.score(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ref.score(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if got != want && sgemm.GonumRegistered() {
			t.Errorf("n %d k %d: score %.17g, with gonum's Sgemm %.17g", tc.n, tc.k, got, want)
		}
		if rel := math.Abs(got-want) / want; !(rel < 1e-6) {
			t.Errorf("n %d k %d: score %.17g, with gonum's Sgemm %.17g (relative %.3g)", tc.n, tc.k, got, want, rel)
		}
	}
}
