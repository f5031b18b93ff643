package calib

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/ork/model"
)

// allRows is an observer keeping every row of every site, in calibration order.
type allRows map[[2]int][]float32

func (a allRows) Observe(layer int, in model.Input, x []float32) {
	a[[2]int{layer, int(in)}] = append(a[[2]int{layer, int(in)}], x...)
}

// both feeds two observers.
type both [2]model.Observer

func (b both) Observe(layer int, in model.Input, x []float32) {
	b[0].Observe(layer, in, x)
	b[1].Observe(layer, in, x)
}

// TestActSampler: the sample of each site is exactly rows 0, stride, 2·stride, ... of what the site saw
// (whatever the batching), at most maxRows of them, for every site that is not per expert.
func TestActSampler(t *testing.T) {
	m, seqs := storiesModel(t)
	c := &m.Cfg
	w := Window{Start: 1, End: 3}
	const maxRows = 100
	src, err := NewEmbeddingSource(m, seqs)
	if err != nil {
		t.Fatal(err)
	}
	// the window starts at layer 1: run layer 0 first
	h0 := filepath.Join(t.TempDir(), "h1")
	captureToFile(t, m, Window{Start: 0, End: 1}, src, h0)
	s, err := NewActSampler(c, w, len(seqs), len(seqs[0]), maxRows)
	if err != nil {
		t.Fatal(err)
	}
	all := allRows{}
	if _, err := capture(context.Background(), m, w, openHidden(t, h0), nil, finishUpper, both{s, all}); err != nil {
		t.Fatal(err)
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	stride := SampleStride(len(seqs), len(seqs[0]), maxRows)
	if stride != 11 { // ceil(1024/100) = 11, coprime with 128
		t.Fatalf("stride %d, want 11", stride)
	}
	var held int64
	for l := w.Start; l < w.End; l++ {
		for in, site := range c.Sites(l) {
			a := s.Sample(l, model.Input(in))
			if a == nil {
				t.Fatalf("layer %d site %s: not sampled", l, site.Name)
			}
			rows := all[[2]int{l, in}]
			k := site.Width
			if a.K != k || a.Seen != int64(len(rows)/k) || a.Rows != SampleRows(len(seqs), len(seqs[0]), stride) || a.Rows > maxRows {
				t.Fatalf("layer %d site %s: K %d rows %d seen %d (site saw %d rows of %d)", l, site.Name, a.K, a.Rows, a.Seen, len(rows)/k, k)
			}
			for r := 0; r < a.Rows; r++ {
				if !equalF32(a.Data[r*k:(r+1)*k], rows[r*stride*k:(r*stride+1)*k]) {
					t.Fatalf("layer %d site %s: sample row %d is not row %d", l, site.Name, r, r*stride)
				}
			}
			held += int64(len(a.Data)) * 4
		}
	}
	if want := ActSampleMemory(c, w, len(seqs), len(seqs[0]), maxRows); held != want {
		t.Fatalf("samples hold %d bytes, ActSampleMemory says %d", held, want)
	}
	if s.Sample(0, model.InputQKV) != nil || s.Sample(1, model.Input(9)) != nil {
		t.Fatal("a site outside the window is sampled")
	}
}

func equalF32(a, b []float32) bool {
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

// TestSampleStride: the stride keeps at most maxRows rows and shares no factor with the sequence length.
func TestSampleStride(t *testing.T) {
	for _, tc := range []struct{ nSeq, seqLen, max, want int }{
		{23, 512, 1024, 13}, // ceil(11776/1024) = 12, shares 4 with 512
		{8, 128, 100, 11},
		{1, 10, 100, 1},
		{32, 512, 512, 33},
		{4, 6, 3, 11}, // 8 shares 2, 9 and 10 share 3 and 2, 11
	} {
		s := SampleStride(tc.nSeq, tc.seqLen, tc.max)
		if s != tc.want || SampleRows(tc.nSeq, tc.seqLen, s) > tc.max || gcd(s, tc.seqLen) != 1 {
			t.Errorf("%+v: stride %d (%d rows)", tc, s, SampleRows(tc.nSeq, tc.seqLen, s))
		}
	}
}

func sampleBytes(t testing.TB, a *ActSample) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteActSample(&b, a); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestActSampleFile: the file round-trips exactly; a changed byte, a truncated file, a header whose
// sizes do not match the file, a bad row count and a non-finite value are refused.
func TestActSampleFile(t *testing.T) {
	a := &ActSample{K: 3, Rows: 2, Stride: 4, Seen: 5, Data: []float32{1, -2, 3.5, 0, 1e-3, -7}}
	b := sampleBytes(t, a)
	if int64(len(b)) != ActSampleFileSize(3, 2) {
		t.Fatalf("%d bytes, ActSampleFileSize %d", len(b), ActSampleFileSize(3, 2))
	}
	got, err := ReadActSample(bytes.NewReader(b), int64(len(b)), "a")
	if err != nil || got.K != 3 || got.Rows != 2 || got.Stride != 4 || got.Seen != 5 || !equalF32(got.Data, a.Data) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	path := filepath.Join(t.TempDir(), "a")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadActSampleFile(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	flip := append([]byte(nil), b...)
	flip[40] ^= 1
	if _, err := ReadActSample(bytes.NewReader(flip), int64(len(flip)), "a"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("flipped value: %v", err)
	}
	if _, err := ReadActSample(bytes.NewReader(b[:len(b)-1]), int64(len(b)-1), "a"); !errors.Is(err, ErrFormat) {
		t.Errorf("truncated: %v", err)
	}
	big := append([]byte(nil), b...)
	big[16] = 200 // rows
	if _, err := ReadActSample(bytes.NewReader(big), int64(len(big)), "a"); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "200 rows") {
		t.Errorf("rows in the header beyond the file: %v", err)
	}
	for _, bad := range []*ActSample{
		{K: 3, Rows: 2, Stride: 4, Seen: 9, Data: a.Data},                                   // 9 rows at stride 4 are 3 samples
		{K: 3, Rows: 2, Stride: 4, Seen: 5, Data: []float32{1, 2, 3, 4, 5, float32(inf())}}, // not finite
		{K: 3, Rows: 2, Stride: 4, Seen: 5, Data: a.Data[:5]},
	} {
		if err := WriteActSample(&bytes.Buffer{}, bad); err == nil {
			t.Errorf("wrote %+v", bad)
		}
	}
}

func inf() float64 { var z float64; return 1 / z }

// FuzzReadActSample: the reader never panics, never allocates beyond the file, and what it accepts is a
// valid sample of exactly the file's size.
func FuzzReadActSample(f *testing.F) {
	f.Add(sampleBytes(f, &ActSample{K: 3, Rows: 2, Stride: 4, Seen: 5, Data: []float32{1, -2, 3.5, 0, 1e-3, -7}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ReadActSample(bytes.NewReader(b), int64(len(b)), "fuzz")
		if err == nil {
			if err := a.check(); err != nil {
				t.Fatalf("accepted an invalid sample: %v", err)
			}
			if int64(len(b)) != ActSampleFileSize(a.K, a.Rows) {
				t.Fatalf("accepted K=%d rows=%d from %d bytes", a.K, a.Rows, len(b))
			}
		}
	})
}

// TestActSampleFuzzSeed keeps a valid sample file in the FuzzReadActSample corpus (-update rewrites it).
func TestActSampleFuzzSeed(t *testing.T) {
	path := filepath.Join("testdata", "fuzz", "FuzzReadActSample", "valid")
	if *update {
		b := sampleBytes(t, &ActSample{K: 4, Rows: 3, Stride: 3, Seen: 7, Data: []float32{1, 2, 3, 4, -1, -2, -3, -4, 0.5, 0, 0, 9}})
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
		t.Fatalf("seed %s missing (run with -update): %v", path, err)
	}
}
