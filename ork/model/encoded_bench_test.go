package model

import (
	"fmt"
	"testing"
	"time"

	"orkpipe/ork/gguf"
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
