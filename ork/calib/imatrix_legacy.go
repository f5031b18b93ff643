package calib

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
)

// legacyEntry is the header of one entry of the legacy .dat form.
type legacyEntry struct {
	Name  string // up to the first NUL: llama.cpp reads the name as a C string
	NCall int
	NVal  int // values in the entry: n_mat·K for an MoE weight (the form does not say K)
}

// legacyTrailer is what may follow the entries: the last call count and the dataset name.
type legacyTrailer struct {
	Present    bool
	ChunkCount int
	Dataset    string // "" when the stored name is empty
}

// legacyValues reads the values of the entry being visited, in order. Every value of the file is
// decoded and checked (finite, >= 0), whether a visitor keeps it or not, so every reader of the form
// refuses the same files.
type legacyValues struct {
	r    *bufio.Reader
	path string
	e    legacyEntry
	pos  int // values consumed
}

// Read returns values [from, from+n) of the entry (from at or after what was read before).
func (v *legacyValues) Read(from, n int) ([]float64, error) {
	if from < v.pos || n < 0 || from+n > v.e.NVal {
		return nil, fmt.Errorf("imatrix %s: entry %s: values [%d, %d) asked of %d, %d already read", v.path, v.e.Name, from, from+n, v.e.NVal, v.pos)
	}
	if err := v.skip(from - v.pos); err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for j := range out {
		x, err := v.next()
		if err != nil {
			return nil, err
		}
		out[j] = x
	}
	return out, nil
}

// skip decodes and checks the next n values, keeping none.
func (v *legacyValues) skip(n int) error {
	for range n {
		if _, err := v.next(); err != nil {
			return err
		}
	}
	return nil
}

func (v *legacyValues) next() (float64, error) {
	var b [4]byte
	if _, err := io.ReadFull(v.r, b[:]); err != nil {
		return 0, fmt.Errorf("imatrix %s: entry %s value %d: %w (%w)", v.path, v.e.Name, v.pos, err, ErrFormat)
	}
	x := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[:])))
	if !imatrixValue(x) {
		return 0, fmt.Errorf("imatrix %s: entry %s value %d = %v: want finite >= 0: %w", v.path, v.e.Name, v.pos, x, ErrFormat)
	}
	v.pos++
	return x, nil
}

// walkLegacy is the one reader of llama.cpp's legacy imatrix form (size bytes from r); every reader of
// the form (ParseLegacyImatrix, ReadImatrixRow, ImatrixShapes) walks the file with it, so they accept
// the same files and see the same entries. It calls visit with each entry in file order; visit reads
// what values it wants through the legacyValues, the rest are skipped. Decisions, as llama.cpp's
// common_imatrix_load_legacy reads the form:
//
//   - an entry whose name appeared before replaces it (llama.cpp keeps the last): visitors keep the
//     last entry of each name;
//   - the trailer (int32 last call count, int32 dataset name length, the name) is optional; a name of
//     length 0 is no dataset.
//
// Where llama.cpp reads on regardless, the walker refuses with ErrFormat, naming the file: a trailer
// that is cut short or followed by more bytes (a truncated or appended file), a negative ncall, an
// entry count or length larger than the file.
func walkLegacy(ctx context.Context, r *bufio.Reader, size int64, path string, visit func(legacyEntry, *legacyValues) error) (legacyTrailer, error) {
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
		return legacyTrailer{}, err
	}
	if n < 1 || int64(n) > left/12 {
		return legacyTrailer{}, fmt.Errorf("imatrix %s: entry count %d: want 1..%d for %d bytes: %w", path, n, left/12, size, ErrFormat)
	}
	for i := 0; i < int(n); i++ {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return legacyTrailer{}, err
			}
		}
		l, err := i32(fmt.Sprintf("entry %d name length", i))
		if err != nil {
			return legacyTrailer{}, err
		}
		if l < 1 || int64(l) > left {
			return legacyTrailer{}, fmt.Errorf("imatrix %s: entry %d name length %d: want 1..%d: %w", path, i, l, left, ErrFormat)
		}
		nb := make([]byte, l)
		if _, err := io.ReadFull(r, nb); err != nil {
			return legacyTrailer{}, fmt.Errorf("imatrix %s: entry %d name: %w (%w)", path, i, err, ErrFormat)
		}
		left -= int64(l)
		name, _, _ := strings.Cut(string(nb), "\x00")
		ncall, err := i32(fmt.Sprintf("entry %s ncall", name))
		if err != nil {
			return legacyTrailer{}, err
		}
		nval, err := i32(fmt.Sprintf("entry %s value count", name))
		if err != nil {
			return legacyTrailer{}, err
		}
		if nval < 1 || int64(nval) > left/4 || ncall < 0 {
			return legacyTrailer{}, fmt.Errorf("imatrix %s: entry %s: %d values, ncall %d: want 1..%d values and ncall >= 0: %w", path, name, nval, ncall, left/4, ErrFormat)
		}
		vals := &legacyValues{r: r, path: path, e: legacyEntry{Name: name, NCall: int(ncall), NVal: int(nval)}}
		if err := visit(vals.e, vals); err != nil {
			return legacyTrailer{}, err
		}
		if err := vals.skip(vals.e.NVal - vals.pos); err != nil {
			return legacyTrailer{}, err
		}
		left -= 4 * int64(nval)
	}
	if left == 0 {
		return legacyTrailer{}, nil
	}
	if left < 8 {
		return legacyTrailer{}, fmt.Errorf("imatrix %s: %d bytes after the entries: want none, or the last call count and the dataset name length (8 bytes) and the name: %w", path, left, ErrFormat)
	}
	last, _ := i32("last call count")
	dl, _ := i32("dataset name length")
	if dl < 0 || int64(dl) != left {
		return legacyTrailer{}, fmt.Errorf("imatrix %s: dataset name length %d, %d bytes left after it: want them equal: %w", path, dl, left, ErrFormat)
	}
	ds := make([]byte, dl)
	if _, err := io.ReadFull(r, ds); err != nil {
		return legacyTrailer{}, fmt.Errorf("imatrix %s: dataset name: %w (%w)", path, err, ErrFormat)
	}
	return legacyTrailer{Present: true, ChunkCount: int(last), Dataset: string(ds)}, nil
}

// ParseLegacyImatrix reads llama.cpp's legacy .dat form (see the package doc and walkLegacy). An MoE
// weight's values for all experts form one row of n_expert·K values (the file does not say K), so K
// is the value count.
func ParseLegacyImatrix(b []byte, name string) (*Imatrix, error) {
	return readLegacyImatrix(context.Background(), bufio.NewReader(bytes.NewReader(b)), int64(len(b)), name)
}

func readLegacyImatrix(ctx context.Context, r *bufio.Reader, size int64, path string) (*Imatrix, error) {
	im := &Imatrix{Entries: map[string]*ImatrixEntry{}}
	tr, err := walkLegacy(ctx, r, size, path, func(e legacyEntry, v *legacyValues) error {
		row, err := v.Read(0, e.NVal)
		if err != nil {
			return err
		}
		im.Entries[e.Name] = &ImatrixEntry{Name: e.Name, K: e.NVal, Sum2: [][]float64{row}, Counts: []float64{float64(e.NCall)}}
		return nil
	})
	if err != nil {
		return nil, err
	}
	im.ChunkCount = tr.ChunkCount
	if tr.Dataset != "" {
		im.Datasets = []string{tr.Dataset}
	}
	return im, nil
}

// imatrixRowLegacy reads matrix mat of weight tensor (k values per matrix, nMat matrices) from the
// legacy form: the last entry of that name.
func imatrixRowLegacy(ctx context.Context, r *bufio.Reader, size int64, path, tensor string, k, nMat, mat int) (ImatrixRow, error) {
	var found *legacyEntry
	var row ImatrixRow
	_, err := walkLegacy(ctx, r, size, path, func(e legacyEntry, v *legacyValues) error {
		if e.Name != tensor {
			return nil
		}
		found, row = &e, ImatrixRow{}
		if int64(e.NVal) != int64(k)*int64(nMat) {
			return nil // a later entry of the name may replace it; judged after the walk
		}
		vals, err := v.Read(mat*k, k)
		if err != nil {
			return err
		}
		row = ImatrixRow{Sum2: vals, Count: float64(e.NCall)}
		return nil
	})
	switch {
	case err != nil:
		return ImatrixRow{}, err
	case found == nil:
		return ImatrixRow{}, fmt.Errorf("imatrix %s: no entry for weight %s (an imatrix of another model?): %w", path, tensor, ErrNoEntry)
	case row.Sum2 == nil:
		return ImatrixRow{}, fmt.Errorf("imatrix %s: entry %s has %d values, weight %s needs %d (K=%d x %d matrices): %w", path, tensor, found.NVal, tensor, k*nMat, k, nMat, ErrShape)
	}
	return row, nil
}

// legacyShapes lists the entries of the legacy form with their value counts, reading no values.
func legacyShapes(ctx context.Context, r *bufio.Reader, size int64, path string) (map[string]ImatrixShape, error) {
	out := map[string]ImatrixShape{}
	_, err := walkLegacy(ctx, r, size, path, func(e legacyEntry, _ *legacyValues) error {
		out[e.Name] = ImatrixShape{K: e.NVal, NMat: 1, Legacy: true}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
