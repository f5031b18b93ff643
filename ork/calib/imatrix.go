package calib

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"orkpipe/ork/gguf"
)

// ImatrixEntry is the importance data of one weight: per matrix (expert) the sum over calibration tokens
// of the squared activation of each input channel, i.e. diag(H).
type ImatrixEntry struct {
	Name string // weight tensor name, e.g. blk.0.attn_q.weight
	K    int    // input channels per matrix
	// Sum2[m] has K values. GGUF form: in_sum2 as stored. Legacy form: the stored values, which llama.cpp
	// writes as mean(x²)·ncall.
	Sum2 [][]float64
	// Counts[m] is the number of tokens (GGUF form) or ncall (legacy form) Sum2[m] was accumulated over;
	// Sum2[m][i] / Counts[m] is the mean squared activation either way.
	Counts []float64
}

// Mean returns mean(x²) per input channel of matrix m (0 where the count is 0), as llama-quantize uses it.
func (e *ImatrixEntry) Mean(m int) []float64 {
	out := make([]float64, e.K)
	if c := e.Counts[m]; c > 0 {
		for i, v := range e.Sum2[m] {
			out[i] = v / c
		}
	}
	return out
}

// Hessian returns diag(H) of matrix m as a diagonal Hessian (off-diagonal terms are unknown to an
// imatrix and set to 0), with Tokens from the count.
func (e *ImatrixEntry) Hessian(m int) *Hessian {
	h := NewHessian(e.K)
	for i, v := range e.Sum2[m] {
		h.Data[i*e.K+i] = v
	}
	h.Tokens = int64(e.Counts[m])
	return h
}

// Imatrix is a whole importance-matrix file.
type Imatrix struct {
	Entries  map[string]*ImatrixEntry
	Datasets []string
	// ChunkCount is imatrix.chunk_count (GGUF) or the last call count (legacy, 0 when absent).
	ChunkCount int
}

// ReadImatrix reads an imatrix file in either form, told apart by the GGUF magic.
func ReadImatrix(ctx context.Context, path string) (*Imatrix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	defer f.Close()
	isGGUF, size, err := imatrixForm(f, path)
	if err != nil {
		return nil, err
	}
	if isGGUF {
		g, err := gguf.Open(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("imatrix: %w", err)
		}
		defer g.Close()
		return ImatrixFromGGUF(ctx, g)
	}
	return readLegacyImatrix(ctx, bufio.NewReaderSize(f, 1<<16), size, path)
}

// imatrixForm reads the magic of the open imatrix file f, reports whether it is the GGUF form, and leaves
// f at its start.
func imatrixForm(f *os.File, path string) (isGGUF bool, size int64, err error) {
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return false, 0, fmt.Errorf("imatrix %s: %w (%w)", path, err, ErrFormat)
	}
	st, err := f.Stat()
	if err != nil {
		return false, 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, 0, err
	}
	return string(magic[:]) == "GGUF", st.Size(), nil
}

// ggufImatrixEntry is one weight's pair of tensors in the GGUF form.
type ggufImatrixEntry struct {
	Sums, Counts gguf.TensorInfo
	K, NMat      int
}

// ggufImatrixTable checks the GGUF form's tensor table for every reader of it (ImatrixFromGGUF,
// ReadImatrixRow, ImatrixShapes), as llama.cpp's common_imatrix_load does and a little stricter:
// general.type is "imatrix" when present; every <name>.in_sum2 (F32, [K, n]) has its <name>.counts
// (F32, [1, n]) and every counts tensor its in_sum2; no other tensor.
func ggufImatrixTable(g *gguf.File) (map[string]ggufImatrixEntry, error) {
	if v, ok := g.Lookup("general.type"); ok {
		if s, err := v.Str(); err != nil || s != "imatrix" {
			return nil, fmt.Errorf("imatrix %s: general.type = %v, want \"imatrix\": %w", g.Path, v, ErrFormat)
		}
	}
	out := map[string]ggufImatrixEntry{}
	for _, t := range g.Tensors {
		if base, ok := strings.CutSuffix(t.Name, ".counts"); ok {
			if _, err := g.Tensor(base + ".in_sum2"); err != nil {
				return nil, fmt.Errorf("imatrix %s: %s has no %s.in_sum2: %w", g.Path, t.Name, base, ErrFormat)
			}
			continue
		}
		base, ok := strings.CutSuffix(t.Name, ".in_sum2")
		if !ok {
			return nil, fmt.Errorf("imatrix %s: tensor %s: neither <name>.in_sum2 nor <name>.counts: %w", g.Path, t.Name, ErrFormat)
		}
		ct, err := g.Tensor(base + ".counts")
		if err != nil {
			return nil, fmt.Errorf("imatrix %s: %s has no %s.counts: %w", g.Path, t.Name, base, ErrFormat)
		}
		if t.Type != gguf.TypeF32 || ct.Type != gguf.TypeF32 {
			return nil, fmt.Errorf("imatrix %s: %s: in_sum2 and counts must be F32, got %s and %s: %w", g.Path, base, t.Type, ct.Type, ErrFormat)
		}
		n := int64(1)
		if len(t.Shape) == 2 {
			n = t.Shape[1]
		}
		if len(t.Shape) < 1 || len(t.Shape) > 2 || t.Shape[0] < 1 || n < 1 || len(ct.Shape) < 1 || ct.Shape[0] != 1 || ct.Elements() != n {
			return nil, fmt.Errorf("imatrix %s: %s: in_sum2 shape %v and counts shape %v disagree (want [K, n] and [1, n]): %w", g.Path, base, t.Shape, ct.Shape, ErrFormat)
		}
		out[base] = ggufImatrixEntry{Sums: t, Counts: ct, K: int(t.Shape[0]), NMat: int(n)}
	}
	return out, nil
}

// imatrixValue checks one stored sum or count: finite and >= 0.
func imatrixValue(v float64) bool { return v >= 0 && !math.IsInf(v, 0) }

// ImatrixFromGGUF reads the GGUF form: tensor pairs <name>.in_sum2 (F32, [K, n_mat]) and <name>.counts
// (F32, [1, n_mat]); general.type must be "imatrix" when present.
func ImatrixFromGGUF(ctx context.Context, g *gguf.File) (*Imatrix, error) {
	table, err := ggufImatrixTable(g)
	if err != nil {
		return nil, err
	}
	im := &Imatrix{Entries: map[string]*ImatrixEntry{}}
	if v, ok := g.Lookup("imatrix.datasets"); ok {
		ds, err := v.StringArray()
		if err != nil {
			return nil, fmt.Errorf("imatrix %s: imatrix.datasets: %w", g.Path, err)
		}
		im.Datasets = ds
	}
	if _, ok := g.Lookup("imatrix.chunk_count"); ok {
		n, err := g.Uint("imatrix.chunk_count")
		if err != nil {
			return nil, err
		}
		im.ChunkCount = int(n)
	}
	for base, te := range table {
		k := te.K
		sums := make([]float32, te.Sums.Elements())
		if err := g.ReadRows(ctx, te.Sums, 0, sums); err != nil {
			return nil, err
		}
		counts := make([]float32, te.NMat)
		if err := g.ReadRows(ctx, te.Counts, 0, counts); err != nil {
			return nil, err
		}
		e := &ImatrixEntry{Name: base, K: k}
		for m := 0; m < te.NMat; m++ {
			row := make([]float64, k)
			for i := range row {
				row[i] = float64(sums[m*k+i])
				if !imatrixValue(row[i]) {
					return nil, fmt.Errorf("imatrix %s: %s.in_sum2[%d][%d] = %v: want a finite value >= 0: %w", g.Path, base, m, i, row[i], ErrFormat)
				}
			}
			c := float64(counts[m])
			if !imatrixValue(c) {
				return nil, fmt.Errorf("imatrix %s: %s.counts[%d] = %v: want a finite value >= 0: %w", g.Path, base, m, c, ErrFormat)
			}
			e.Sum2 = append(e.Sum2, row)
			e.Counts = append(e.Counts, c)
		}
		im.Entries[base] = e
	}
	return im, nil
}
