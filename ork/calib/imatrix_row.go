package calib

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"

	"orkpipe/ork/gguf"
)

// ErrNoEntry is wrapped when an imatrix file holds no entry for a weight that needs one.
var ErrNoEntry = errors.New("imatrix has no entry for the weight")

// ImatrixRow is the importance of one matrix of one weight (one expert slice of an MoE weight).
type ImatrixRow struct {
	Sum2  []float64 // K values: Σ x² per input channel (legacy form: mean(x²)·ncall, as stored)
	Count float64   // tokens (GGUF form) or ncall (legacy form) Sum2 was accumulated over
}

// Mean returns mean(x²) per input channel, the importance llama-quantize weights by. It fails when
// the count is 0 (no calibration token reached the matrix: all its importance is unknown).
func (r ImatrixRow) Mean() ([]float64, error) {
	if r.Count <= 0 {
		return nil, fmt.Errorf("count %v: no calibration token reached it", r.Count)
	}
	out := make([]float64, len(r.Sum2))
	for i, v := range r.Sum2 {
		out[i] = v / r.Count
	}
	return out, nil
}

// ReadImatrixRow reads the importance of matrix mat of weight tensor from the imatrix file at path
// (GGUF or legacy form, told apart by the magic), reading only that entry: the file may cover a
// whole model. k is the weight's number of input channels and nMat its number of matrices (1 for a
// 2-D weight, n_expert for an MoE expert tensor, whose expert e is mat e). The entry must have
// exactly k values per matrix and nMat matrices (the legacy form stores an MoE weight as one row of
// nMat·k values); otherwise the error (wrapping ErrShape) names the file, the tensor and what was
// expected. A missing entry wraps ErrNoEntry; a malformed file wraps ErrFormat.
func ReadImatrixRow(ctx context.Context, path, tensor string, k, nMat, mat int) (ImatrixRow, error) {
	if k < 1 || nMat < 1 || mat < 0 || mat >= nMat {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: %s: asked for matrix %d of %d with K=%d", path, tensor, mat, nMat, k)
	}
	f, err := os.Open(path)
	if err != nil {
		return ImatrixRow{}, fmt.Errorf("imatrix: %w", err)
	}
	defer f.Close()
	isGGUF, size, err := imatrixForm(f, path)
	if err != nil {
		return ImatrixRow{}, err
	}
	if isGGUF {
		g, err := gguf.Open(ctx, path)
		if err != nil {
			return ImatrixRow{}, fmt.Errorf("imatrix: %w", err)
		}
		defer g.Close()
		return imatrixRowGGUF(ctx, g, tensor, k, nMat, mat)
	}
	return imatrixRowLegacy(ctx, bufio.NewReaderSize(f, 1<<16), size, path, tensor, k, nMat, mat)
}

func imatrixRowGGUF(ctx context.Context, g *gguf.File, tensor string, k, nMat, mat int) (ImatrixRow, error) {
	table, err := ggufImatrixTable(g)
	if err != nil {
		return ImatrixRow{}, err
	}
	te, ok := table[tensor]
	if !ok {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: no tensor %s.in_sum2 for weight %s (an imatrix of another model?): %w", g.Path, tensor, tensor, ErrNoEntry)
	}
	if te.K != k || te.NMat != nMat {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: %s.in_sum2 is [%d, %d] (K, matrices), weight %s needs [%d, %d]: %w", g.Path, tensor, te.K, te.NMat, tensor, k, nMat, ErrShape)
	}
	sums := make([]float32, k)
	if err := g.ReadRows(ctx, te.Sums, int64(mat), sums); err != nil {
		return ImatrixRow{}, fmt.Errorf("imatrix: %w", err)
	}
	counts := make([]float32, nMat)
	if err := g.ReadRows(ctx, te.Counts, 0, counts); err != nil {
		return ImatrixRow{}, fmt.Errorf("imatrix: %w", err)
	}
	row := ImatrixRow{Sum2: make([]float64, k), Count: float64(counts[mat])}
	for i, v := range sums {
		row.Sum2[i] = float64(v)
		if !imatrixValue(row.Sum2[i]) {
			return ImatrixRow{}, fmt.Errorf("imatrix %s: %s.in_sum2[%d][%d] = %v: want a finite value >= 0: %w", g.Path, tensor, mat, i, v, ErrFormat)
		}
	}
	if !imatrixValue(row.Count) {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: %s.counts[%d] = %v: want a finite value >= 0: %w", g.Path, tensor, mat, row.Count, ErrFormat)
	}
	return row, nil
}

// ImatrixShape is what an imatrix file says about one weight's entry, without its values.
type ImatrixShape struct {
	K      int  // values per matrix (legacy form: every value of the entry, as the file does not say K)
	NMat   int  // matrices (legacy form: 1)
	Legacy bool // read from the legacy form
}

// Fits reports whether the entry can serve a weight of k input channels and nMat matrices: exactly
// [k, nMat] in the GGUF form, nMat·k values in the legacy form.
func (s ImatrixShape) Fits(k, nMat int) bool {
	if s.Legacy {
		return s.K == k*nMat
	}
	return s.K == k && s.NMat == nMat
}

// String describes the entry's shape for error messages.
func (s ImatrixShape) String() string {
	if s.Legacy {
		return fmt.Sprintf("%d values", s.K)
	}
	return fmt.Sprintf("K=%d x %d matrices", s.K, s.NMat)
}

// ImatrixShapes lists the entries of the imatrix file at path with their shapes, reading no values
// (the GGUF form's tensor table; the legacy form is scanned, skipping the values), so a planner can
// check every weight it binds to the file before anything runs.
func ImatrixShapes(ctx context.Context, path string) (map[string]ImatrixShape, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	defer f.Close()
	isGGUF, size, err := imatrixForm(f, path)
	if err != nil {
		return nil, err
	}
	if !isGGUF {
		return legacyShapes(ctx, bufio.NewReaderSize(f, 1<<16), size, path)
	}
	g, err := gguf.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	defer g.Close()
	table, err := ggufImatrixTable(g)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ImatrixShape, len(table))
	for base, te := range table {
		out[base] = ImatrixShape{K: te.K, NMat: te.NMat}
	}
	return out, nil
}
