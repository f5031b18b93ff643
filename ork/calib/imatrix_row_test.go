package calib

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testEntries returns a dense entry (K 8) and an MoE entry (3 experts of K 4, expert 1 seen by no token).
func testEntries() []*ImatrixEntry {
	dense := &ImatrixEntry{Name: "blk.0.attn_q.weight", K: 8, Counts: []float64{10}}
	dense.Sum2 = [][]float64{{10, 20, 30, 40, 50, 60, 70, 80}}
	moe := &ImatrixEntry{Name: "blk.0.ffn_up_exps.weight", K: 4, Counts: []float64{4, 0, 2}}
	moe.Sum2 = [][]float64{{4, 8, 12, 16}, {0, 0, 0, 0}, {2, 2, 4, 6}}
	return []*ImatrixEntry{moe, dense}
}

func writeImatrixFiles(t *testing.T) (ggufPath, legacyPath string) {
	t.Helper()
	dir := t.TempDir()
	var g, l bytes.Buffer
	if err := WriteImatrixGGUF(context.Background(), &g, testEntries(), []string{"calib.txt"}, 3); err != nil {
		t.Fatal(err)
	}
	if err := WriteLegacyImatrix(&l, testEntries(), 3, "calib.txt"); err != nil {
		t.Fatal(err)
	}
	ggufPath, legacyPath = filepath.Join(dir, "imatrix.gguf"), filepath.Join(dir, "imatrix.dat")
	if err := os.WriteFile(ggufPath, g.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(legacyPath, l.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return ggufPath, legacyPath
}

// TestReadImatrixRow reads one matrix from both forms written by the writers: the means agree with
// the entries (and with ReadImatrix of the whole file), expert slices of an MoE entry included.
func TestReadImatrixRow(t *testing.T) {
	ctx := context.Background()
	gp, lp := writeImatrixFiles(t)
	for _, path := range []string{gp, lp} {
		whole, err := ReadImatrix(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			tensor     string
			k, n, mat  int
			want       []float64
			zeroTokens bool
		}{
			{"blk.0.attn_q.weight", 8, 1, 0, []float64{1, 2, 3, 4, 5, 6, 7, 8}, false},
			{"blk.0.ffn_up_exps.weight", 4, 3, 0, []float64{1, 2, 3, 4}, false},
			{"blk.0.ffn_up_exps.weight", 4, 3, 2, []float64{1, 1, 2, 3}, false},
			{"blk.0.ffn_up_exps.weight", 4, 3, 1, nil, true},
		} {
			row, err := ReadImatrixRow(ctx, path, tc.tensor, tc.k, tc.n, tc.mat)
			if err != nil {
				t.Fatalf("%s: %s[%d]: %v", filepath.Base(path), tc.tensor, tc.mat, err)
			}
			mean, err := row.Mean()
			if tc.zeroTokens {
				// GGUF keeps the zero count; the legacy form has one ncall for all experts, and the zero row.
				if strings.HasSuffix(path, ".gguf") && err == nil {
					t.Errorf("%s: expert with count 0 gave a mean %v", tc.tensor, mean)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				if d := mean[i] - tc.want[i]; d > 1e-6 || d < -1e-6 {
					t.Fatalf("%s: %s[%d]: mean %v, want %v", filepath.Base(path), tc.tensor, tc.mat, mean, tc.want)
				}
			}
			// the whole-file reader agrees (legacy: one row of n·K values)
			e := whole.Entries[tc.tensor]
			var wm []float64
			if len(e.Sum2) == tc.n {
				wm = e.Mean(tc.mat)
			} else {
				wm = e.Mean(0)[tc.mat*tc.k : (tc.mat+1)*tc.k]
			}
			for i := range wm {
				if d := wm[i] - mean[i]; d > 1e-9 || d < -1e-9 {
					t.Fatalf("%s: %s[%d]: ReadImatrixRow %v, ReadImatrix %v", filepath.Base(path), tc.tensor, tc.mat, mean, wm)
				}
			}
		}
	}
}

// TestReadImatrixRowErrors: missing file, missing entry, K mismatch and matrix-count mismatch each
// fail naming the file and the tensor, for both forms.
func TestReadImatrixRowErrors(t *testing.T) {
	ctx := context.Background()
	gp, lp := writeImatrixFiles(t)
	for _, path := range []string{gp, lp} {
		for _, tc := range []struct {
			name, tensor string
			k, n, mat    int
			is           error
			want         []string
		}{
			{"missing entry", "blk.1.attn_q.weight", 8, 1, 0, ErrNoEntry, []string{"blk.1.attn_q.weight"}},
			{"K mismatch", "blk.0.attn_q.weight", 16, 1, 0, ErrShape, []string{"blk.0.attn_q.weight", "16"}},
			{"experts mismatch", "blk.0.ffn_up_exps.weight", 4, 4, 3, ErrShape, []string{"blk.0.ffn_up_exps.weight"}},
		} {
			_, err := ReadImatrixRow(ctx, path, tc.tensor, tc.k, tc.n, tc.mat)
			if !errors.Is(err, tc.is) {
				t.Errorf("%s %s: err = %v, want %v", filepath.Base(path), tc.name, err, tc.is)
				continue
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s %s: error %q does not name %q", filepath.Base(path), tc.name, err, w)
				}
			}
		}
	}
	missing := filepath.Join(t.TempDir(), "none.gguf")
	if _, err := ReadImatrixRow(ctx, missing, "x", 4, 1, 0); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: %v", err)
	}
	b, _ := os.ReadFile(lp)
	// The MoE entry is first (name order); a file cut anywhere before the end of its expert 2 fails.
	end := 4 + 4 + len("blk.0.ffn_up_exps.weight") + 8 + 4*12
	for cut := 1; cut < end; cut += 3 {
		if _, err := imatrixRowLegacy(ctx, bufio.NewReader(bytes.NewReader(b[:cut])), int64(cut), "cut", "blk.0.ffn_up_exps.weight", 4, 3, 2); err == nil {
			t.Fatalf("legacy imatrix cut at %d of %d: read a row", cut, len(b))
		}
	}
}

// FuzzImatrixRowLegacy: the three readers of the legacy form (whole file, one row, shapes) walk it with
// one walker, so they accept exactly the same files and agree on every entry they see.
func FuzzImatrixRowLegacy(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x03\x00\x00\x00abc\x02\x00\x00\x00\x02\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40"))
	var l bytes.Buffer
	WriteLegacyImatrix(&l, testEntries(), 3, "calib.txt")
	f.Add(l.Bytes())
	f.Add(legacyBytes([]legacyTestEntry{{"abc", 1, []float32{1, 2}}, {"abc", 2, []float32{3, 4}}}, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		ctx := context.Background()
		rd := func() *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
		im, werr := readLegacyImatrix(ctx, rd(), int64(len(b)), "fuzz")
		shapes, serr := legacyShapes(ctx, rd(), int64(len(b)), "fuzz")
		if (werr == nil) != (serr == nil) {
			t.Fatalf("whole-file reader: %v; shapes: %v", werr, serr)
		}
		if werr == nil && len(shapes) != len(im.Entries) {
			t.Fatalf("%d shapes, %d entries", len(shapes), len(im.Entries))
		}
		for _, tc := range []struct {
			name    string
			k, n, m int
		}{{"abc", 2, 1, 0}, {"abc", 1, 2, 1}, {"blk.0.ffn_up_exps.weight", 4, 3, 2}} {
			row, err := imatrixRowLegacy(ctx, rd(), int64(len(b)), "fuzz", tc.name, tc.k, tc.n, tc.m)
			if werr != nil {
				if err == nil || errors.Is(err, ErrNoEntry) || errors.Is(err, ErrShape) {
					t.Fatalf("%s: whole-file reader refused (%v), row reader: %v", tc.name, werr, err)
				}
				continue
			}
			e := im.Entries[tc.name]
			switch {
			case e == nil:
				if !errors.Is(err, ErrNoEntry) {
					t.Fatalf("%s: not in the file, row reader: %v", tc.name, err)
				}
			case e.K != tc.k*tc.n || !shapes[tc.name].Fits(tc.k, tc.n):
				if !errors.Is(err, ErrShape) || e.K == tc.k*tc.n {
					t.Fatalf("%s: %d values, shape %v, row reader for %dx%d: %v", tc.name, e.K, shapes[tc.name], tc.k, tc.n, err)
				}
			default:
				if err != nil || row.Count != e.Counts[0] {
					t.Fatalf("%s: row reader %v (count %v, entry %v)", tc.name, err, row.Count, e.Counts[0])
				}
				for i, v := range row.Sum2 {
					if v != e.Sum2[0][tc.m*tc.k+i] {
						t.Fatalf("%s value %d: %v vs %v", tc.name, i, v, e.Sum2[0][tc.m*tc.k+i])
					}
				}
			}
		}
	})
}

type legacyTestEntry struct {
	name   string
	ncall  int32
	values []float32
}

// legacyBytes lays entries out in the legacy form, followed by trailer as given (nil: no trailer).
func legacyBytes(es []legacyTestEntry, trailer []byte) []byte {
	var b bytes.Buffer
	put := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	put(int32(len(es)))
	for _, e := range es {
		put(int32(len(e.name)))
		b.WriteString(e.name)
		put(e.ncall)
		put(int32(len(e.values)))
		put(e.values)
	}
	b.Write(trailer)
	return b.Bytes()
}

// TestLegacyImatrixDecisions: duplicates and the trailer are decided once, as llama.cpp's reader decides
// them (the last entry of a name wins; the trailer is optional, an empty dataset name is none), and a
// file llama.cpp would read past (a cut or extended trailer, a bad value anywhere) is refused by every
// reader alike.
func TestLegacyImatrixDecisions(t *testing.T) {
	ctx := context.Background()
	trailer := func(chunks int32, name string) []byte {
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, chunks)
		binary.Write(&b, binary.LittleEndian, int32(len(name)))
		b.WriteString(name)
		return b.Bytes()
	}
	a1 := legacyTestEntry{"a", 1, []float32{1, 2}}
	a2 := legacyTestEntry{"a", 2, []float32{6, 8}}
	a4 := legacyTestEntry{"a", 2, []float32{2, 4, 6, 8}}
	b1 := legacyTestEntry{"b", 1, []float32{3}}
	nan := legacyTestEntry{"b", 1, []float32{float32(math.NaN())}}
	tests := []struct {
		name     string
		file     []byte
		ok       bool
		mean     []float64 // of entry a read as K=2, one matrix
		chunks   int
		datasets []string
		ak       int // values of entry a
	}{
		{"no trailer", legacyBytes([]legacyTestEntry{a1, b1}, nil), true, []float64{1, 2}, 0, nil, 2},
		{"trailer", legacyBytes([]legacyTestEntry{a1, b1}, trailer(7, "calib.txt")), true, []float64{1, 2}, 7, []string{"calib.txt"}, 2},
		{"empty dataset name", legacyBytes([]legacyTestEntry{a1}, trailer(7, "")), true, []float64{1, 2}, 7, nil, 2},
		{"duplicate: the last wins", legacyBytes([]legacyTestEntry{a1, b1, a2}, nil), true, []float64{3, 4}, 0, nil, 2},
		{"duplicate of another size: the last wins", legacyBytes([]legacyTestEntry{a1, a4}, nil), true, nil, 0, nil, 4},
		{"cut trailer", legacyBytes([]legacyTestEntry{a1}, trailer(7, "calib.txt")[:6]), false, nil, 0, nil, 0},
		{"bytes after the trailer", legacyBytes([]legacyTestEntry{a1}, append(trailer(7, "x"), 0)), false, nil, 0, nil, 0},
		{"bad value in another entry", legacyBytes([]legacyTestEntry{a1, nan}, nil), false, nil, 0, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "im.dat")
			if err := os.WriteFile(path, tc.file, 0o644); err != nil {
				t.Fatal(err)
			}
			im, werr := ReadImatrix(ctx, path)
			shapes, serr := ImatrixShapes(ctx, path)
			row, rerr := ReadImatrixRow(ctx, path, "a", 2, 1, 0)
			if !tc.ok {
				for what, err := range map[string]error{"ReadImatrix": werr, "ImatrixShapes": serr, "ReadImatrixRow": rerr} {
					if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), path) {
						t.Errorf("%s: %v, want ErrFormat naming the file", what, err)
					}
				}
				return
			}
			if werr != nil || serr != nil {
				t.Fatalf("ReadImatrix: %v; ImatrixShapes: %v", werr, serr)
			}
			if im.ChunkCount != tc.chunks || !slices.Equal(im.Datasets, tc.datasets) {
				t.Errorf("chunk count %d, datasets %q; want %d, %q", im.ChunkCount, im.Datasets, tc.chunks, tc.datasets)
			}
			if im.Entries["a"].K != tc.ak || shapes["a"].K != tc.ak {
				t.Errorf("entry a: %d values, shape %v; want %d", im.Entries["a"].K, shapes["a"], tc.ak)
			}
			if tc.mean == nil {
				if !errors.Is(rerr, ErrShape) {
					t.Errorf("ReadImatrixRow K=2 of the 4-value entry: %v, want ErrShape", rerr)
				}
				return
			}
			mean, err := row.Mean()
			if rerr != nil || err != nil || !slices.Equal(mean, tc.mean) || !slices.Equal(im.Entries["a"].Mean(0), tc.mean) {
				t.Errorf("entry a: row %v (%v, %v), whole %v; want mean %v", mean, rerr, err, im.Entries["a"].Mean(0), tc.mean)
			}
		})
	}
}

// TestImatrixShapes lists the entries of both forms without their values, and Fits agrees with
// what ReadImatrixRow accepts.
func TestImatrixShapes(t *testing.T) {
	ctx := context.Background()
	gp, lp := writeImatrixFiles(t)
	for _, path := range []string{gp, lp} {
		shapes, err := ImatrixShapes(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if len(shapes) != 2 {
			t.Fatalf("%s: %v", path, shapes)
		}
		for _, tc := range []struct {
			tensor string
			k, n   int
			fits   bool
		}{
			{"blk.0.attn_q.weight", 8, 1, true}, {"blk.0.attn_q.weight", 4, 2, false},
			{"blk.0.ffn_up_exps.weight", 4, 3, true}, {"blk.0.ffn_up_exps.weight", 12, 1, false},
		} {
			s := shapes[tc.tensor]
			_, rerr := ReadImatrixRow(ctx, path, tc.tensor, tc.k, tc.n, 0)
			legacyAmbiguous := s.Legacy && tc.k*tc.n == s.K // the legacy form cannot tell [4, 2] from [8, 1]
			if got := s.Fits(tc.k, tc.n); got != tc.fits && !legacyAmbiguous || got != (rerr == nil) {
				t.Errorf("%s: %s %v Fits(%d, %d) = %v (read: %v), want %v", filepath.Base(path), tc.tensor, s, tc.k, tc.n, got, rerr, tc.fits)
			}
		}
	}
}
