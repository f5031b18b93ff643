package pack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestSupported(t *testing.T) {
	for v, want := range map[uint32]bool{0: false, 1: true, 2: true, 3: true, 4: false, 8: false} {
		if Supported(v) != want {
			t.Errorf("Supported(%d) = %v", v, !want)
		}
	}
}

// TestUnsupportedVersion: a well-formed header with a later version is refused by the one predicate.
func TestUnsupportedVersion(t *testing.T) {
	tr := trailer{version: Version + 1, indexOffset: HeaderSize, indexLength: 64, total: HeaderSize + 64 + FooterSize}
	b := append(encodeHeader(tr), make([]byte, 64)...)
	b = append(b, encodeFooter(tr)...)
	_, err := NewReader(context.Background(), bytesReaderAt(b), int64(len(b)), "next.orkpack")
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
	t.Log(err)
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, errors.New("EOF")
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, errors.New("EOF")
	}
	return n, nil
}

// fuzzSeeds reads the FuzzOpen corpus files.
func fuzzSeeds(t *testing.T) map[string][]byte {
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(raw), "\n", 3)
		if len(lines) < 2 || lines[0] != "go test fuzz v1" {
			t.Fatalf("%s: not a fuzz corpus file", e.Name())
		}
		s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		out[e.Name()] = []byte(s)
	}
	return out
}
