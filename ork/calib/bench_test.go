package calib

import (
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// BenchmarkHessian5120 accumulates H += XᵀX for 512 tokens of a 5120-wide input (float32 activations,
// float64 H, upper triangle) and reports GFLOP/s (2 flops per multiply-add actually needed: T·K·(K+1))
// next to a plain float64 matrix multiply XᵀX of the same size (2·T·K² flops) timed in the same run.
func BenchmarkHessian5120(b *testing.B) {
	const t, k = 512, 5120
	x := make([]float32, t*k)
	x64 := make([]float64, t*k)
	for i := range x {
		x[i] = float32(i%97)*0.01 - 0.5
		x64[i] = float64(x[i])
	}
	// Baseline: gonum Dgemm of XᵀX (full K×K), by hand because testing.Benchmark cannot nest.
	c := make([]float64, k*k)
	xm := blas64.General{Rows: t, Cols: k, Stride: k, Data: x64}
	cm := blas64.General{Rows: k, Cols: k, Stride: k, Data: c}
	runs, start := 0, time.Now()
	for runs < 2 || time.Since(start) < time.Second {
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, xm, xm, 1, cm)
		runs++
	}
	gemm := time.Since(start) / time.Duration(runs)
	gemmGF := 2 * float64(t) * k * k / gemm.Seconds() / 1e9

	a := accumulator{h: NewHessian(k)}
	b.ResetTimer()
	for b.Loop() {
		if err := a.add(x); err != nil {
			b.Fatal(err)
		}
	}
	per := b.Elapsed().Seconds() / float64(b.N)
	gf := float64(t) * k * (k + 1) / per / 1e9
	b.ReportMetric(gf, "GFLOP/s")
	b.ReportMetric(gemmGF, "gemm-GFLOP/s")
	b.ReportMetric(per/gemm.Seconds(), "x-gemm-time")
}
