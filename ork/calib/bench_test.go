package calib

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/quant"
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

	a := newAccumulator(NewHessian(k), nil)
	defer a.batch.release()
	if err := a.add(x); err != nil { // the first update allocates and populates the triangle: untimed
		b.Fatal(err)
	}
	a.flush()
	b.ResetTimer()
	for b.Loop() {
		if err := a.add(x); err != nil {
			b.Fatal(err)
		}
		a.flush() // the update itself: add only batches the rows
	}
	per := b.Elapsed().Seconds() / float64(b.N)
	gf := float64(t) * k * (k + 1) / per / 1e9
	b.ReportMetric(gf, "GFLOP/s")
	b.ReportMetric(gemmGF, "gemm-GFLOP/s")
	b.ReportMetric(per/gemm.Seconds(), "x-gemm-time")
}

// cpuNow is the process's user + system CPU time (BLAS threads included).
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUpdateTiles (-tags blas): one rank-512 update of a K-wide upper triangle (memory already
// touched) with OpenBLAS on its own threads (syrkUpper's tiles of 4096, the baseline) and
// single-threaded with the tiles on Go workers (syrkTiles), interleaved; wall and CPU of each.
func BenchmarkUpdateTiles(b *testing.B) {
	if pureGoBLAS() {
		testfiles.SkipBuild(b, "build with -tags blas")
	}
	for _, k := range []int{17408, 5120} {
		b.Run(fmt.Sprintf("K%d", k), func(b *testing.B) {
			const t = 512
			x := make([]float64, t*k)
			for i := range x {
				x[i] = float64(i%97)*0.01 - 0.5
			}
			c := make([]float64, k*k)
			syrkUpper(c, k, x, t, nil)
			paths := [2]func(){
				func() { syrkUpper(c, k, x, t, nil) },
				func() { defer quant.SingleThreadedBLAS()(); syrkUpper(c, k, x, t, nil) },
			}
			var el, cpu [2]time.Duration
			it := 0
			for b.Loop() {
				for j := range 2 {
					i := (it + j) % 2
					start, c0 := time.Now(), cpuNow()
					paths[i]()
					el[i] += time.Since(start)
					cpu[i] += cpuNow() - c0
				}
				it++
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(it) }
			b.ReportMetric(ms(el[0]), "threads-ms")
			b.ReportMetric(ms(el[1]), "tiles-ms")
			b.ReportMetric(ms(cpu[0]), "threads-cpu-ms")
			b.ReportMetric(ms(cpu[1]), "tiles-cpu-ms")
		})
	}
}
