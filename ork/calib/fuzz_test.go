package calib

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func FuzzHiddenReader(f *testing.F) {
	f.Add(hiddenBytes(f, HiddenHeader{NEmbd: 4, SeqLen: 2, NSeq: 2, Layer: 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		readAllHidden(b) // must not panic, hang or allocate beyond the declared (bounded) sizes
	})
}

func FuzzReadHessian(f *testing.F) {
	h := NewHessian(3)
	h.Add([]float32{1, 2, 3, 3, 2, 1})
	var buf bytes.Buffer
	if err := WriteHessian(&buf, h); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHessian(context.Background(), bytes.NewReader(b), int64(len(b)), "fuzz")
		if err == nil {
			if err := h.Check(); err != nil {
				t.Fatalf("accepted a hessian that fails Check: %v", err)
			}
			if int64(len(b)) != HessianFileSize(h.K) {
				t.Fatalf("accepted K=%d from a file of %d bytes, want exactly %d", h.K, len(b), HessianFileSize(h.K))
			}
		}
	})
}

func FuzzLegacyImatrix(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x03\x00\x00\x00abc\x02\x00\x00\x00\x02\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40"))
	f.Fuzz(func(t *testing.T, b []byte) {
		im, err := ParseLegacyImatrix(b, "fuzz")
		if err == nil {
			for _, e := range im.Entries {
				if len(e.Sum2) != 1 || len(e.Sum2[0]) != e.K {
					t.Fatalf("entry %s: inconsistent", e.Name)
				}
			}
		}
	})
}

var update = flag.Bool("update", false, "rewrite the fuzz seed corpus in testdata/fuzz")

// TestFuzzSeeds keeps a valid file of each format in the seed corpus (go test -run FuzzSeeds -update
// rewrites them) and checks the stored seeds still parse.
func TestFuzzSeeds(t *testing.T) {
	h := NewHessian(3)
	h.Add([]float32{1, 2, 3, 3, 2, 1})
	var hb bytes.Buffer
	if err := WriteHessian(&hb, h); err != nil {
		t.Fatal(err)
	}
	seeds := map[string][]byte{
		"FuzzHiddenReader":  hiddenBytes(t, HiddenHeader{NEmbd: 4, SeqLen: 2, NSeq: 2, Layer: 1}),
		"FuzzReadHessian":   hb.Bytes(),
		"FuzzLegacyImatrix": []byte("\x01\x00\x00\x00\x03\x00\x00\x00abc\x02\x00\x00\x00\x02\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x02\x00\x00\x00\x01\x00\x00\x00d"),
	}
	for name, b := range seeds {
		path := filepath.Join("testdata", "fuzz", name, "valid")
		if *update {
			var s strings.Builder
			s.WriteString("go test fuzz v1\n[]byte(\"")
			for _, c := range b {
				fmt.Fprintf(&s, "\\x%02x", c)
			}
			s.WriteString("\")\n")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(s.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("seed %s missing (run with -update): %v", path, err)
		}
	}
	if _, err := ParseLegacyImatrix(seeds["FuzzLegacyImatrix"], "seed"); err != nil {
		t.Fatal(err)
	}
}
