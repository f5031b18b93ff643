package artifacts

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkFile measures, on one 1 GiB file and in the same run: merely reading it (the
// baseline), hashing it naively (io.Copy into BLAKE3 on one goroutine), with read-ahead on a second
// goroutine (hashSerial), as the store does (HashPath: 4 MiB subtrees on all CPUs), and ingesting
// it (IngestFile, and Ingest from a plain stream) next to a plain copy + fsync. Report each as
// MB/s and as a ratio to "read" (and ingest to "copy-fsync").
//
//	go test -run='^$' -bench=BenchmarkFile -benchtime=3x ./artifacts
func BenchmarkFile(b *testing.B) {
	const size = 1 << 30
	dir := b.TempDir()
	src := filepath.Join(dir, "model.bin")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, newPatternReader("bench", size)); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	buf := make([]byte, blockSize)

	b.Run("read", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			f, err := os.Open(src)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("hash-serial", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			f, err := os.Open(src)
			if err != nil {
				b.Fatal(err)
			}
			h := NewHasher()
			if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("hash-pipelined", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			f, err := os.Open(src)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := hashSerial(ctx, f, size); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
	b.Run("hash", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if _, err := HashPath(ctx, src); err != nil {
				b.Fatal(err)
			}
		}
	})
	s, err := OpenStore(filepath.Join(dir, "cache"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ingest := func(b *testing.B, do func() (Object, error)) {
		b.SetBytes(size)
		for b.Loop() {
			o, err := do()
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := os.Remove(s.objectPath(o.Digest)); err != nil { // next round ingests afresh
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
	b.Run("copy-fsync", func(b *testing.B) { // the floor for any ingest: copy the bytes and fsync
		b.SetBytes(size)
		for b.Loop() {
			in, err := os.Open(src)
			if err != nil {
				b.Fatal(err)
			}
			out, err := os.Create(filepath.Join(dir, "copy"))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.CopyBuffer(struct{ io.Writer }{out}, struct{ io.Reader }{in}, buf); err != nil {
				b.Fatal(err)
			}
			if err := out.Sync(); err != nil {
				b.Fatal(err)
			}
			in.Close()
			out.Close()
			b.StopTimer()
			os.Remove(out.Name())
			b.StartTimer()
		}
	})
	b.Run("ingest-file", func(b *testing.B) {
		ingest(b, func() (Object, error) { return s.IngestFile(ctx, src) })
	})
	b.Run("ingest-stream", func(b *testing.B) {
		ingest(b, func() (Object, error) {
			f, err := os.Open(src)
			if err != nil {
				return Object{}, err
			}
			defer f.Close()
			return s.Ingest(ctx, struct{ io.Reader }{f})
		})
	})
}

// BenchmarkFileInterleaved runs the same measurements as BenchmarkFile but alternates them
// inside every iteration, so each ratio compares runs seconds apart (the machine is shared and
// its load drifts). It reports MB/s per operation and the ratios to reading.
//
//	go test -run='^$' -bench=BenchmarkFileInterleaved -benchtime=3x ./artifacts
func BenchmarkFileInterleaved(b *testing.B) {
	const size = 1 << 30
	dir := b.TempDir()
	src := filepath.Join(dir, "model.bin")
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, newPatternReader("bench", size)); err != nil {
		b.Fatal(err)
	}
	f.Close()
	s, err := OpenStore(filepath.Join(dir, "cache"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	buf := make([]byte, blockSize)
	ops := []struct {
		name string
		run  func() error
	}{
		{"read", func() error {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
			return err
		}},
		{"hash-serial", func() error {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.CopyBuffer(NewHasher(), struct{ io.Reader }{f}, buf)
			return err
		}},
		{"hash", func() error { _, err := HashPath(ctx, src); return err }},
		{"ingest-file", func() error {
			o, err := s.IngestFile(ctx, src)
			if err == nil {
				err = os.Remove(s.objectPath(o.Digest))
			}
			return err
		}},
	}
	total := make([]float64, len(ops))
	for b.Loop() {
		for i, op := range ops {
			start := time.Now()
			if err := op.run(); err != nil {
				b.Fatal(err)
			}
			total[i] += time.Since(start).Seconds()
		}
	}
	n := float64(b.N)
	for i, op := range ops {
		b.ReportMetric(size/1e6*n/total[i], op.name+"-MB/s")
	}
	b.ReportMetric(total[0]/total[1], "hash-serial/read")
	b.ReportMetric(total[0]/total[2], "hash/read")
	b.ReportMetric(total[1]/total[2], "hash/hash-serial")
	b.ReportMetric(total[0]/total[3], "ingest/read")
	b.ReportMetric(0, "ns/op")
}
