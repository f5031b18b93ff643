package artifacts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"
)

func openTestStore(t testing.TB) *Store {
	t.Helper()
	s, err := OpenStore(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openTestStoreAt opens another Store on dir (as another process would).
func openTestStoreAt(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pattern is a deterministic, incompressible byte stream: the BLAKE3 XOF of a seed.
func pattern(seed string, n int) []byte {
	h := blake3.New()
	h.WriteString(seed)
	out := make([]byte, n)
	if _, err := io.ReadFull(h.Digest(), out); err != nil {
		panic(err)
	}
	return out
}

// patternReader streams n bytes of a repeating pattern block without holding them in memory.
type patternReader struct {
	block []byte
	n     int64 // remaining
	off   int
}

func newPatternReader(seed string, n int64) *patternReader {
	return &patternReader{block: pattern(seed, 1<<20+7), n: n}
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	total := 0
	for len(p) > 0 {
		k := copy(p, r.block[r.off:])
		r.off = (r.off + k) % len(r.block)
		p = p[k:]
		total += k
	}
	r.n -= int64(total)
	return total, nil
}

func readAll(t testing.TB, s *Store, d Digest) ([]byte, error) {
	t.Helper()
	rc, err := s.Open(context.Background(), d)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// objectFiles lists every file under objects/.
func objectFiles(t testing.TB, s *Store) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(s.Dir(), "objects"), func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// flipByte flips one bit of the stored object at offset off (the test plays a failing disk).
func flipByte(t testing.TB, s *Store, d Digest, off int64) {
	t.Helper()
	p := s.objectPath(d)
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func mustIngest(t testing.TB, s *Store, b []byte) Object {
	t.Helper()
	o, err := s.Ingest(context.Background(), bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func wantErrIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want one wrapping %v", err, target)
	}
}
