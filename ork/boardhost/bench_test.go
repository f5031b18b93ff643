package boardhost

import (
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// benchFile writes a 64 MiB file of random bytes (packs are int4 payloads: incompressible).
func benchFile(b *testing.B) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "bench.orkpack")
	buf := make([]byte, 64<<20)
	rand.Read(buf)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkHashFile measures the guard's cost per byte; compare with BenchmarkReadFileBaseline
// (the same reads without hashing) from the same run: the ratio is what hashing adds to I/O.
func BenchmarkHashFile(b *testing.B) {
	p := benchFile(b)
	b.SetBytes(64 << 20)
	b.ResetTimer()
	for b.Loop() {
		if _, err := hashFile(context.Background(), p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadFileBaseline(b *testing.B) {
	p := benchFile(b)
	b.SetBytes(64 << 20)
	buf := make([]byte, 1<<20)
	b.ResetTimer()
	for b.Loop() {
		f, err := os.Open(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
