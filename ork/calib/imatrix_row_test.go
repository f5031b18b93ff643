package calib

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
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

// FuzzImatrixRowLegacy: the streaming legacy reader never panics, and whenever both it and the whole-file
// parser accept a file, they return the same values for the entry.
func FuzzImatrixRowLegacy(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x03\x00\x00\x00abc\x02\x00\x00\x00\x02\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40"))
	var l bytes.Buffer
	WriteLegacyImatrix(&l, testEntries(), 3, "calib.txt")
	f.Add(l.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, tc := range []struct {
			name    string
			k, n, m int
		}{{"abc", 2, 1, 0}, {"abc", 1, 2, 1}, {"blk.0.ffn_up_exps.weight", 4, 3, 2}} {
			row, err := imatrixRowLegacy(context.Background(), bufio.NewReader(bytes.NewReader(b)), int64(len(b)), "fuzz", tc.name, tc.k, tc.n, tc.m)
			if err != nil {
				continue
			}
			if len(row.Sum2) != tc.k {
				t.Fatalf("%s: %d values, want %d", tc.name, len(row.Sum2), tc.k)
			}
			im, err := ParseLegacyImatrix(b, "fuzz")
			if err != nil {
				continue // the whole-file parser also checks the trailer the row reader never reaches
			}
			e := im.Entries[tc.name]
			if e == nil {
				t.Fatalf("row reader found %s, whole-file parser did not", tc.name)
			}
			for i, v := range row.Sum2 {
				if v != e.Sum2[0][tc.m*tc.k+i] {
					t.Fatalf("%s value %d: %v vs %v", tc.name, i, v, e.Sum2[0][tc.m*tc.k+i])
				}
			}
		}
	})
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
