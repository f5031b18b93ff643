package model

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/quant"
)

// BenchmarkEncodedApply multiplies 128 tokens by Q8_0 weights (27B-shaped, and a 1024-wide model's
// FFN) kept encoded and, as the
// baseline, by the same weights dequantized to a float32 Dense, interleaved in every iteration (the
// order alternating), and reports both times and their ratio.
func BenchmarkEncodedApply(b *testing.B) {
	for _, s := range [][2]int{{5120, 5120}, {5120, 17408}, {2816, 1024}, {1024, 2816}} {
		n, k := s[0], s[1]
		b.Run(fmt.Sprintf("Q8_0-%dx%d-T128", n, k), func(b *testing.B) {
			e, d := synthEncoded(b, gguf.TypeQ8_0, n, k, 1)
			const t = 128
			x := fill(t * k)
			y := make([]float32, t*n)
			var el [2]time.Duration
			lins := [2]Linear{d, e}
			it := 0
			for b.Loop() {
				for j := range 2 {
					i := (it + j) % 2
					start := time.Now()
					if err := lins[i].Apply(y, x); err != nil {
						b.Fatal(err)
					}
					el[i] += time.Since(start)
				}
				it++
			}
			dense, enc := el[0].Seconds()/float64(it), el[1].Seconds()/float64(it)
			b.ReportMetric(dense*1e3, "dense-ms")
			b.ReportMetric(enc*1e3, "encoded-ms")
			b.ReportMetric(enc/dense, "x-dense")
		})
	}
}

// BenchmarkEncodedPipelined (-tags blas): under OpenBLAS, Apply's pipelined path against the two-worker
// path gonum's Sgemm needs and against a float32 Dense of the same weights, interleaved in every
// iteration (the order rotating), for the 27B shapes' FFN and DeltaNet input weights at a calibration
// chunk's 512 tokens and at 128; reports the three times and the ratios to the worker path.
func BenchmarkEncodedPipelined(b *testing.B) {
	if gonumSgemm() {
		testfiles.SkipBuild(b, "the pipelined path runs under another BLAS than gonum's: build with -tags blas")
	}
	for _, s := range [][3]int{{17408, 5120, 512}, {5120, 17408, 512}, {10240, 5120, 512}, {17408, 5120, 128}} {
		n, k, t := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("Q8_0-%dx%d-T%d", n, k, t), func(b *testing.B) {
			e, d := synthEncoded(b, gguf.TypeQ8_0, n, k, 1)
			x := fill(t * k)
			y := make([]float32, t*n)
			paths := [3]func() error{
				func() error { return d.Apply(y, x) },
				func() error { return e.applyWorkers(y, x, t) },
				func() error { return e.applyPipelined(y, x, t) },
			}
			var el [3]time.Duration
			it := 0
			for b.Loop() {
				for j := range 3 {
					i := (it + j) % 3
					start := time.Now()
					if err := paths[i](); err != nil {
						b.Fatal(err)
					}
					el[i] += time.Since(start)
				}
				it++
			}
			ms := func(i int) float64 { return el[i].Seconds() * 1e3 / float64(it) }
			b.ReportMetric(ms(0), "dense-ms")
			b.ReportMetric(ms(1), "workers-ms")
			b.ReportMetric(ms(2), "pipelined-ms")
			b.ReportMetric(ms(2)/ms(1), "pipelined/workers")
			b.ReportMetric(ms(0)/ms(1), "dense/workers")
		})
	}
}

// cpuNow is the process's user + system CPU time (BLAS threads included).
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEncodedPanels (-tags blas): Apply at a calibration chunk's 512 tokens with OpenBLAS on its
// own threads (applyPipelined, the baseline) and single-threaded with the panels on Go workers
// (applyPanels), interleaved in every iteration (the order alternating); wall and CPU times of each.
func BenchmarkEncodedPanels(b *testing.B) {
	if gonumSgemm() {
		testfiles.SkipBuild(b, "build with -tags blas")
	}
	for _, s := range [][3]int{{17408, 5120, 512}, {5120, 17408, 512}, {10240, 5120, 512}} {
		n, k, t := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("Q8_0-%dx%d-T%d", n, k, t), func(b *testing.B) {
			e, _ := synthEncoded(b, gguf.TypeQ8_0, n, k, 1)
			x := fill(t * k)
			y := make([]float32, t*n)
			paths := [2]func() error{
				func() error { return e.Apply(y, x) },
				func() error { defer quant.SingleThreadedBLAS()(); return e.Apply(y, x) },
			}
			var el, cpu [2]time.Duration
			it := 0
			for b.Loop() {
				for j := range 2 {
					i := (it + j) % 2
					start, c0 := time.Now(), cpuNow()
					if err := paths[i](); err != nil {
						b.Fatal(err)
					}
					el[i] += time.Since(start)
					cpu[i] += cpuNow() - c0
				}
				it++
			}
			ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(it) }
			b.ReportMetric(ms(el[0]), "pipelined-ms")
			b.ReportMetric(ms(el[1]), "panels-ms")
			b.ReportMetric(ms(cpu[0]), "pipelined-cpu-ms")
			b.ReportMetric(ms(cpu[1]), "panels-cpu-ms")
			b.ReportMetric(ms(el[1])/ms(el[0]), "panels/pipelined")
		})
	}
}

// BenchmarkEncodedExperts multiplies the tokens an 8B MoE's expert gets from a 512-token sequence (64 of
// them; and 384) by 48 expert-shaped Q8_0 weights in turn (LFM2-8B-A1B's gate/up 1792 × 2048 and down
// 2048 × 1792: 180 MB of bytes, so that none stays in cache), each Apply with its rows decoded by
// sgemm.NTRows, with the weight dequantized whole first (the row-block path, decodeRows off) and, the
// baseline, as a float32 Dense; interleaved in every iteration, the order rotating.
func BenchmarkEncodedExperts(b *testing.B) {
	for _, s := range [][3]int{{1792, 2048, 64}, {2048, 1792, 64}, {1792, 2048, 384}} {
		n, k, t := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("Q8_0-%dx%d-T%d", n, k, t), func(b *testing.B) {
			const weights = 48
			es, ds := make([]*Encoded, weights), make([]Linear, weights)
			for i := range es {
				es[i], ds[i] = synthEncoded(b, gguf.TypeQ8_0, n, k, uint64(i+1))
			}
			x := fill(t * k)
			y := make([]float32, t*n)
			defer func(prev bool) { decodeRows = prev }(decodeRows)
			var el [3]time.Duration
			it := 0
			for b.Loop() {
				for j := range 3 {
					path := (it + j) % 3 // 0 dense, 1 row blocks, 2 decoded rows
					decodeRows = path == 2
					start := time.Now()
					for w := range weights {
						var l Linear = ds[w]
						if path > 0 {
							l = es[w]
						}
						if err := l.Apply(y, x); err != nil {
							b.Fatal(err)
						}
					}
					el[path] += time.Since(start)
				}
				it++
			}
			ms := func(i int) float64 { return el[i].Seconds() * 1e3 / float64(it*weights) }
			b.ReportMetric(ms(0), "dense-ms")
			b.ReportMetric(ms(1), "blocks-ms")
			b.ReportMetric(ms(2), "decoded-ms")
			b.ReportMetric(ms(2)/ms(1), "decoded-x-blocks")
		})
	}
}
