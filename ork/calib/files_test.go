package calib

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
)

func hiddenBytes(t testing.TB, hdr HiddenHeader) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewHiddenWriter(&buf, hdr)
	if err != nil {
		t.Fatal(err)
	}
	seq := make([]float32, hdr.SeqLen*hdr.NEmbd)
	for s := 0; s < hdr.NSeq; s++ {
		for i := range seq {
			seq[i] = float32(s*1000+i) * 0.25
		}
		if err := w.WriteSeq(seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readAllHidden(b []byte) (int, error) {
	r, err := NewHiddenReader(bytes.NewReader(b), "test")
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		_, err := r.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

func TestHiddenFile(t *testing.T) {
	hdr := HiddenHeader{NEmbd: 8, SeqLen: 3, NSeq: 2, Layer: 4}
	good := hiddenBytes(t, hdr)
	if int64(len(good)) != hdr.FileBytes() {
		t.Fatalf("file is %d bytes, header says %d", len(good), hdr.FileBytes())
	}
	if n, err := readAllHidden(good); err != nil || n != 2 {
		t.Fatalf("read back: %d sequences, %v", n, err)
	}
	flip := func(off int) []byte {
		b := bytes.Clone(good)
		b[off] ^= 0x40
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"payload bit flip", flip(40), ErrCorrupt},
		{"digest bit flip", flip(len(good) - 1), ErrCorrupt},
		{"magic", flip(0), ErrFormat},
		{"version", flip(8), ErrFormat},
		{"reserved", flip(28), ErrFormat},
		{"truncated payload", good[:len(good)-40], ErrFormat},
		{"truncated digest", good[:len(good)-5], ErrFormat},
		{"trailing byte", append(bytes.Clone(good), 0), ErrFormat},
		{"empty", nil, ErrFormat},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := readAllHidden(c.b); !errors.Is(err, c.want) {
				t.Errorf("error %v, want %v", err, c.want)
			}
		})
	}
	w, _ := NewHiddenWriter(io.Discard, hdr)
	if err := w.WriteSeq(make([]float32, 5)); !errors.Is(err, ErrShape) {
		t.Errorf("short sequence: %v", err)
	}
	if err := w.Close(); !errors.Is(err, ErrShape) {
		t.Errorf("close after 0 of 2 sequences: %v", err)
	}
}

func TestHessianFile(t *testing.T) {
	h := NewHessian(5)
	x := []float32{1, 2, 3, 4, 5, -1, 0.5, 2, 0, 1}
	if err := h.Add(x); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteHessian(&buf, h); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	got, err := ReadHessian(context.Background(), bytes.NewReader(good), int64(len(good)), "h")
	if err != nil {
		t.Fatal(err)
	}
	if got.K != 5 || got.Tokens != 2 || !equalF64(got.Data, h.Data) {
		t.Fatalf("read back %+v, wrote %+v", got, h)
	}
	flip := func(off int) []byte {
		b := bytes.Clone(good)
		b[off] ^= 0x01
		return b
	}
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"payload bit flip", flip(40), ErrCorrupt},
		{"magic", flip(1), ErrFormat},
		{"K", flip(12), ErrFormat},
		{"truncated", good[:len(good)-33], ErrFormat},
		{"trailing byte", append(bytes.Clone(good), 1), ErrFormat},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ReadHessian(context.Background(), bytes.NewReader(c.b), int64(len(c.b)), "h"); !errors.Is(err, c.want) {
				t.Errorf("error %v, want %v", err, c.want)
			}
		})
	}
	for _, c := range []struct {
		name string
		data []float64
	}{
		{"NaN above the diagonal", []float64{1, math.NaN(), 0, 1}},
		{"Inf on the diagonal", []float64{1, 0, 0, math.Inf(1)}},
		{"negative diagonal", []float64{-1, 0, 0, 1}},
		{"beyond float32", []float64{1, 1e39, 1e39, 1}},
	} {
		if err := WriteHessian(io.Discard, &Hessian{K: 2, Data: c.data}); !errors.Is(err, ErrNotFinite) {
			t.Errorf("%s: written: %v", c.name, err)
		}
	}
	// The file holds the upper triangle as float32: the lower one is neither checked nor written, and
	// reads back mirrored; values read back rounded to float32.
	buf.Reset()
	if err := WriteHessian(&buf, &Hessian{K: 2, Tokens: 1, Data: []float64{1, 0.1, math.NaN(), 3}}); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadHessian(context.Background(), bytes.NewReader(buf.Bytes()), int64(buf.Len()), "h"); err != nil || !equalF64(got.Data, []float64{1, float64(float32(0.1)), float64(float32(0.1)), 3}) {
		t.Errorf("upper triangle {1, 0.1, 3} read back as %v, %v; want [1 0.1f 0.1f 3]", got, err)
	}
	if err := (&Hessian{K: 2, Data: []float64{1, 2, 3, 1}}).Check(); !errors.Is(err, ErrNotFinite) {
		t.Errorf("Check of an asymmetric matrix: %v", err)
	}
}

func equalF64(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestImatrixRoundTrip writes the diagonals of Hessians captured on stories260K as llama.cpp imatrix
// files (GGUF and legacy form, as llama-imatrix lays them out) and reads them back.
func TestImatrixRoundTrip(t *testing.T) {
	m, seqs := storiesModel(t)
	src, err := NewEmbeddingSource(m, seqs[:2])
	if err != nil {
		t.Fatal(err)
	}
	res, err := Capture(context.Background(), m, Window{Start: 0, End: 1}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]*Hessian{}
	for in := model.Input(0); in < model.NumInputs; in++ {
		for _, w := range in.Weights() {
			names["blk.0."+w+".weight"] = res.Hessian(0, in)
		}
	}
	dir := t.TempDir()

	// GGUF form.
	var hdr gguf.Header
	hdr.KV = []gguf.KV{{Key: "general.type", Value: gguf.String("imatrix")},
		{Key: "imatrix.datasets", Value: gguf.Strings([]string{"stories-calib.txt"})},
		{Key: "imatrix.chunk_count", Value: gguf.Uint32(2)}, {Key: "imatrix.chunk_size", Value: gguf.Uint32(128)}}
	var order []string
	for n := range names {
		order = append(order, n)
	}
	data := map[string][]float32{}
	for _, n := range order {
		h := names[n]
		d := h.Diag()
		f := make([]float32, len(d))
		for i, v := range d {
			f[i] = float32(v)
		}
		hdr.Tensors = append(hdr.Tensors,
			gguf.TensorInfo{Name: n + ".in_sum2", Type: gguf.TypeF32, Shape: []int64{int64(h.K), 1}},
			gguf.TensorInfo{Name: n + ".counts", Type: gguf.TypeF32, Shape: []int64{1, 1}})
		data[n+".in_sum2"] = f
		data[n+".counts"] = []float32{float32(h.Tokens)}
	}
	path := filepath.Join(dir, "imatrix.gguf")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = gguf.Write(context.Background(), f, hdr, func(_ context.Context, _ int, ti gguf.TensorInfo, w io.Writer) error {
		return binary.Write(w, binary.LittleEndian, data[ti.Name])
	})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	im, err := ReadImatrix(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Entries) != len(names) || im.ChunkCount != 2 || len(im.Datasets) != 1 {
		t.Fatalf("GGUF imatrix: %d entries, chunk count %d, datasets %v", len(im.Entries), im.ChunkCount, im.Datasets)
	}
	for n, h := range names {
		e := im.Entries[n]
		if e == nil || e.K != h.K || e.Counts[0] != float64(h.Tokens) {
			t.Fatalf("GGUF imatrix entry %s: %+v", n, e)
		}
		checkDiag(t, n, e.Hessian(0).Diag(), h.Diag(), 1e-6)
	}

	// Legacy form: values = sum2 / count · ncall, ncall = chunks.
	var b bytes.Buffer
	put := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	put(int32(len(order)))
	const ncall = 2
	for _, n := range order {
		h := names[n]
		put(int32(len(n)))
		b.WriteString(n)
		put(int32(ncall))
		put(int32(h.K))
		for _, v := range h.Diag() {
			put(float32(v / float64(h.Tokens) * ncall))
		}
	}
	put(int32(ncall))
	put(int32(len("stories-calib.txt")))
	b.WriteString("stories-calib.txt")
	lpath := filepath.Join(dir, "imatrix.dat")
	if err := os.WriteFile(lpath, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	lim, err := ReadImatrix(context.Background(), lpath)
	if err != nil {
		t.Fatal(err)
	}
	if len(lim.Entries) != len(names) || lim.ChunkCount != ncall || lim.Datasets[0] != "stories-calib.txt" {
		t.Fatalf("legacy imatrix: %d entries, chunk count %d, datasets %v", len(lim.Entries), lim.ChunkCount, lim.Datasets)
	}
	for n, h := range names {
		mean := h.Diag()
		for i := range mean {
			mean[i] /= float64(h.Tokens)
		}
		checkDiag(t, n+" (legacy)", lim.Entries[n].Mean(0), mean, 1e-6)
	}
	for cut := 1; cut < b.Len(); cut += 97 {
		if _, err := ParseLegacyImatrix(b.Bytes()[:cut], "cut"); !errors.Is(err, ErrFormat) {
			t.Fatalf("legacy imatrix cut at %d: %v", cut, err)
		}
	}
}

func checkDiag(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > tol*math.Abs(want[i])+1e-30 {
			t.Fatalf("%s[%d] = %g, want %g", name, i, got[i], want[i])
		}
	}
}
