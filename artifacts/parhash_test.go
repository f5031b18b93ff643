package artifacts

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestParallelHashMatchesSerial: the multi-core file hash equals BLAKE3 of the bytes (upstream
// zeebo/blake3 via SumBytes) at and around piece boundaries, for any worker count.
func TestParallelHashMatchesSerial(t *testing.T) {
	data := pattern("pieces", 3*PieceSize+5000)
	dir := t.TempDir()
	for _, n := range []int{PieceSize + 1, PieceSize + 1024, 2 * PieceSize, 2*PieceSize + 1, 3*PieceSize + 5000} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, data[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		want := SumBytes(data[:n])
		for _, workers := range []int{2, 3, 8} {
			got, err := hashParallel(context.Background(), f, int64(n), workers)
			if err != nil || got != want {
				t.Fatalf("%d bytes, %d workers: %v, %v; want %v", n, workers, got, err, want)
			}
		}
		if got, err := hashSerial(context.Background(), f, int64(n)); err != nil || got != want {
			t.Fatalf("%d bytes serial: %v, %v; want %v", n, got, err, want)
		}
		// A file shorter than claimed (truncated meanwhile) is an error, not a digest.
		if _, err := hashParallel(context.Background(), f, int64(n)+PieceSize, 2); err == nil {
			t.Fatalf("%d bytes hashed as %d: no error", n, n+PieceSize)
		}
		f.Close()
	}
}
