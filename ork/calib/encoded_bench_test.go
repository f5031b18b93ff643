package calib

import (
	"context"
	"os"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/model"
)

// BenchmarkCaptureEncoded calibrates every layer of a quantized test model (stories260K-Q8_0: Q8_0
// weights and an F16 ffn_down) over 8 sequences of 256 tokens, the way the calibrate stage reads it
// (no weight cache), with the weights read as float32 Dense ("dense", the baseline) and kept in their
// encoding ("encoded"), interleaved in every iteration (the order alternating), and reports both times
// and their ratio.
func BenchmarkCaptureEncoded(b *testing.B) {
	ctx := context.Background()
	path := testfiles.Path(b, "stories260K-Q8_0.gguf")
	text, err := os.ReadFile(testfiles.Path(b, "stories-calib.txt"))
	if err != nil {
		b.Fatal(err)
	}
	type arm struct {
		m       *model.Model
		elapsed time.Duration
	}
	var arms [2]arm // 0: dense, 1: encoded
	var seqs [][]int32
	for i := range arms {
		m, tok, f, err := model.OpenGGUF(ctx, path, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		m.Src.(*model.GGUFSource).KeepEncoded = i == 1
		arms[i].m = m
		if seqs == nil {
			ids, err := tok.Encode(string(text), true, false)
			if err != nil {
				b.Fatal(err)
			}
			if seqs, err = Sequences(ids, 8, 256, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	run := func(a *arm) {
		src, err := NewEmbeddingSource(a.m, seqs)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := Capture(ctx, a.m, Window{Start: 0, End: a.m.Cfg.NLayer}, src, nil); err != nil {
			b.Fatal(err)
		}
		a.elapsed += time.Since(start)
	}
	n := 0
	for b.Loop() {
		first := n % 2
		run(&arms[first])
		run(&arms[1-first])
		n++
	}
	dense, enc := arms[0].elapsed.Seconds()/float64(n), arms[1].elapsed.Seconds()/float64(n)
	b.ReportMetric(dense*1e3, "dense-ms")
	b.ReportMetric(enc*1e3, "encoded-ms")
	b.ReportMetric(enc/dense, "x-dense")
}
