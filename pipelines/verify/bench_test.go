package verify

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"orkpipe/pipelines/verify/verifytest"
)

// BenchmarkIntegrity measures the integrity check (sha256 and BLAKE3 of every provenance subject in
// one streaming pass, 2 files at a time) against a baseline measured in the same run: sha256 alone
// over the same files, one after the other (what `sha256sum` of the subjects costs). It reports
// ratio = integrity time / baseline time.
func BenchmarkIntegrity(b *testing.B) {
	dir := b.TempDir()
	verifytest.BuildDir(b, dir)
	files, err := Locate(dir)
	if err != nil {
		b.Fatal(err)
	}
	subs, err := readProvenance(files.Provenance)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	baseline := func() {
		for _, s := range subs {
			f, err := os.Open(filepath.Join(dir, s.Name))
			if err != nil {
				b.Fatal(err)
			}
			h := sha256.New()
			io.CopyBuffer(h, f, make([]byte, 1<<20))
			f.Close()
		}
	}
	b.ResetTimer()
	var tBase, tCheck time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		baseline()
		t1 := time.Now()
		if err := checkProvenance(ctx, files, 2); err != nil {
			b.Fatal(err)
		}
		tBase += t1.Sub(t0)
		tCheck += time.Since(t1)
	}
	b.ReportMetric(float64(tCheck)/float64(tBase), "ratio")
	b.ReportMetric(float64(tBase.Nanoseconds())/float64(b.N), "baseline-ns/op")
	b.ReportMetric(float64(tCheck.Nanoseconds())/float64(b.N), "integrity-ns/op")
}
