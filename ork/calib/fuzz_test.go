package calib

import (
	"bytes"
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
		h, err := ReadHessian(bytes.NewReader(b), "fuzz")
		if err == nil {
			if err := h.Check(); err != nil {
				t.Fatalf("accepted a hessian that fails Check: %v", err)
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
