package stages

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// TestSHA256FileSparse: a file with holes (at the start, inside, at the end) hashes as its logical
// bytes, holes being zeros, whatever the hole boundaries are.
func TestSHA256FileSparse(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		size   int64
		writes map[int64]int // offset -> length of data written there (the rest are holes)
	}{
		{"empty", 0, nil},
		{"all hole", 5<<20 + 3, nil},
		{"dense", 3<<20 + 17, map[int64]int{0: 3<<20 + 17}},
		{"hole data hole", 9 << 20, map[int64]int{4 << 20: 1<<20 + 5}},
		{"data hole data", 9<<20 + 1, map[int64]int{0: 100, 8 << 20: 1<<20 + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := make([]byte, tc.size)
			path := filepath.Join(dir, tc.name)
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			for off, n := range tc.writes {
				b := bytes.Repeat([]byte{byte(off>>20) + 1, 7, 9}, n/3+1)[:n]
				copy(want[off:], b)
				if _, err := f.WriteAt(b, off); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Truncate(tc.size); err != nil {
				t.Fatal(err)
			}
			f.Close()
			sum := sha256.Sum256(want)
			got, err := sha256File(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if got != hex.EncodeToString(sum[:]) {
				t.Errorf("sha256 %s, want %x", got, sum)
			}
		})
	}
}
