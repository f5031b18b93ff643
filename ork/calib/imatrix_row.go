package calib

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

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
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: %w (%w)", path, err, ErrFormat)
	}
	if string(magic[:]) == "GGUF" {
		g, err := gguf.Open(ctx, path)
		if err != nil {
			return ImatrixRow{}, fmt.Errorf("imatrix: %w", err)
		}
		defer g.Close()
		return imatrixRowGGUF(ctx, g, tensor, k, nMat, mat)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return ImatrixRow{}, err
	}
	st, err := f.Stat()
	if err != nil {
		return ImatrixRow{}, err
	}
	return imatrixRowLegacy(ctx, bufio.NewReaderSize(f, 1<<16), st.Size(), path, tensor, k, nMat, mat)
}

func imatrixRowGGUF(ctx context.Context, g *gguf.File, tensor string, k, nMat, mat int) (ImatrixRow, error) {
	if v, ok := g.Lookup("general.type"); ok {
		if s, err := v.Str(); err != nil || s != "imatrix" {
			return ImatrixRow{}, fmt.Errorf("imatrix %s: general.type = %v, want \"imatrix\": %w", g.Path, v, ErrFormat)
		}
	}
	t, err := g.Tensor(tensor + ".in_sum2")
	if err != nil {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: no tensor %s.in_sum2 for weight %s (an imatrix of another model?): %w", g.Path, tensor, tensor, ErrNoEntry)
	}
	ct, err := g.Tensor(tensor + ".counts")
	if err != nil {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: %s.in_sum2 has no %s.counts: %w", g.Path, tensor, tensor, ErrFormat)
	}
	if t.Type != gguf.TypeF32 || ct.Type != gguf.TypeF32 {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: %s: in_sum2 and counts must be F32, got %s and %s: %w", g.Path, tensor, t.Type, ct.Type, ErrFormat)
	}
	n := int64(1)
	if len(t.Shape) == 2 {
		n = t.Shape[1]
	}
	if len(t.Shape) < 1 || len(t.Shape) > 2 || len(ct.Shape) < 1 || ct.Shape[0] != 1 || ct.Elements() != n {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: %s: in_sum2 shape %v and counts shape %v disagree (want [K, n] and [1, n]): %w", g.Path, tensor, t.Shape, ct.Shape, ErrFormat)
	}
	if t.Shape[0] != int64(k) || n != int64(nMat) {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: %s.in_sum2 is [%d, %d] (K, matrices), weight %s needs [%d, %d]: %w", g.Path, tensor, t.Shape[0], n, tensor, k, nMat, ErrShape)
	}
	sums := make([]float32, k)
	if err := g.ReadRows(ctx, t, int64(mat), sums); err != nil {
		return ImatrixRow{}, fmt.Errorf("imatrix: %w", err)
	}
	counts := make([]float32, n)
	if err := g.ReadRows(ctx, ct, 0, counts); err != nil {
		return ImatrixRow{}, fmt.Errorf("imatrix: %w", err)
	}
	row := ImatrixRow{Sum2: make([]float64, k), Count: float64(counts[mat])}
	for i, v := range sums {
		row.Sum2[i] = float64(v)
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return ImatrixRow{}, fmt.Errorf("imatrix %s: %s.in_sum2[%d][%d] = %v: want a finite value >= 0: %w", g.Path, tensor, mat, i, v, ErrFormat)
		}
	}
	if c := row.Count; !(c >= 0) || math.IsInf(c, 0) {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: %s.counts[%d] = %v: want a finite value >= 0: %w", g.Path, tensor, mat, c, ErrFormat)
	}
	return row, nil
}

// imatrixRowLegacy scans the legacy form's entries (see ParseLegacyImatrix), skipping the values of
// every other weight, and reads only the wanted matrix.
func imatrixRowLegacy(ctx context.Context, r *bufio.Reader, size int64, path, tensor string, k, nMat, mat int) (ImatrixRow, error) {
	found, err := imatrixLegacyScan(ctx, r, size, path, tensor, nil)
	if err != nil {
		return ImatrixRow{}, err
	}
	if found == nil {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: no entry for weight %s (an imatrix of another model?): %w", path, tensor, ErrNoEntry)
	}
	ncall, nval := found[0], found[1]
	if int64(nval) != int64(k)*int64(nMat) {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: entry %s has %d values, weight %s needs %d (K=%d x %d matrices): %w", path, tensor, nval, tensor, k*nMat, k, nMat, ErrShape)
	}
	if _, err := r.Discard(4 * k * mat); err != nil {
		return ImatrixRow{}, fmt.Errorf("imatrix %s: entry %s values: %w (%w)", path, tensor, err, ErrFormat)
	}
	row := ImatrixRow{Sum2: make([]float64, k), Count: float64(ncall)}
	var vb [4]byte
	for j := range row.Sum2 {
		if _, err := io.ReadFull(r, vb[:]); err != nil {
			return ImatrixRow{}, fmt.Errorf("imatrix %s: entry %s value %d: %w (%w)", path, tensor, mat*k+j, err, ErrFormat)
		}
		v := math.Float32frombits(binary.LittleEndian.Uint32(vb[:]))
		if !(v >= 0) || math.IsInf(float64(v), 0) {
			return ImatrixRow{}, fmt.Errorf("imatrix %s: entry %s value %d = %v: want finite >= 0: %w", path, tensor, mat*k+j, v, ErrFormat)
		}
		row.Sum2[j] = float64(v)
	}
	return row, nil
}

// imatrixLegacyScan walks the entries of the legacy form, calling visit (if not nil) with each
// entry's name and value count, and skipping the values. When an entry is named want, it stops with
// the reader at that entry's values and returns [ncall, nval]; it returns nil when no entry is.
func imatrixLegacyScan(ctx context.Context, r *bufio.Reader, size int64, path, want string, visit func(name string, nval int)) ([]int, error) {
	left := size
	i32 := func(what string) (int32, error) {
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, fmt.Errorf("imatrix %s: %s: %w (truncated: %w)", path, what, err, ErrFormat)
		}
		left -= 4
		return int32(binary.LittleEndian.Uint32(b[:])), nil
	}
	n, err := i32("entry count")
	if err != nil {
		return nil, err
	}
	if n < 1 || int64(n) > left/12 {
		return nil, fmt.Errorf("imatrix %s: entry count %d: want 1..%d for %d bytes: %w", path, n, left/12, size, ErrFormat)
	}
	for i := 0; i < int(n); i++ {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		l, err := i32(fmt.Sprintf("entry %d name length", i))
		if err != nil {
			return nil, err
		}
		if l < 1 || int64(l) > left {
			return nil, fmt.Errorf("imatrix %s: entry %d name length %d: want 1..%d: %w", path, i, l, left, ErrFormat)
		}
		nb := make([]byte, l)
		if _, err := io.ReadFull(r, nb); err != nil {
			return nil, fmt.Errorf("imatrix %s: entry %d name: %w (%w)", path, i, err, ErrFormat)
		}
		left -= int64(l)
		name, _, _ := strings.Cut(string(nb), "\x00") // llama.cpp reads it as a C string
		ncall, err := i32(fmt.Sprintf("entry %s ncall", name))
		if err != nil {
			return nil, err
		}
		nval, err := i32(fmt.Sprintf("entry %s value count", name))
		if err != nil {
			return nil, err
		}
		if nval < 1 || int64(nval) > left/4 || ncall < 0 {
			return nil, fmt.Errorf("imatrix %s: entry %s: %d values, ncall %d: want 1..%d values and ncall >= 0: %w", path, name, nval, ncall, left/4, ErrFormat)
		}
		if visit != nil {
			visit(name, int(nval))
		}
		if name == want {
			return []int{int(ncall), int(nval)}, nil
		}
		if _, err := r.Discard(4 * int(nval)); err != nil {
			return nil, fmt.Errorf("imatrix %s: entry %s values: %w (%w)", path, name, err, ErrFormat)
		}
		left -= 4 * int64(nval)
	}
	return nil, nil
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
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil {
		return nil, fmt.Errorf("imatrix %s: %w (%w)", path, err, ErrFormat)
	}
	out := map[string]ImatrixShape{}
	if string(magic[:]) == "GGUF" {
		g, err := gguf.Open(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("imatrix: %w", err)
		}
		defer g.Close()
		for _, t := range g.Tensors {
			base, ok := strings.CutSuffix(t.Name, ".in_sum2")
			if !ok {
				continue
			}
			if len(t.Shape) < 1 || len(t.Shape) > 2 {
				return nil, fmt.Errorf("imatrix %s: %s has shape %v, want [K, n]: %w", path, t.Name, t.Shape, ErrFormat)
			}
			s := ImatrixShape{K: int(t.Shape[0]), NMat: 1}
			if len(t.Shape) == 2 {
				s.NMat = int(t.Shape[1])
			}
			out[base] = s
		}
		return out, nil
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(f, 1<<16)
	// want "" matches no entry (names are not empty): every entry is visited and skipped.
	_, err = imatrixLegacyScan(ctx, r, st.Size(), path, "", func(name string, nval int) {
		out[name] = ImatrixShape{K: nval, NMat: 1, Legacy: true}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
