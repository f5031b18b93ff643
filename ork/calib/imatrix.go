package calib

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
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
		return nil, err
	}
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: imatrix: %w (%w)", path, err, ErrFormat)
	}
	if string(magic[:]) == "GGUF" {
		g, err := gguf.Open(ctx, path)
		if err != nil {
			return nil, err
		}
		defer g.Close()
		return ImatrixFromGGUF(ctx, g)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseLegacyImatrix(b, path)
}

// ImatrixFromGGUF reads the GGUF form: tensor pairs <name>.in_sum2 (F32, [K, n_mat]) and <name>.counts
// (F32, [1, n_mat]); general.type must be "imatrix" when present.
func ImatrixFromGGUF(ctx context.Context, g *gguf.File) (*Imatrix, error) {
	if v, ok := g.Lookup("general.type"); ok {
		if s, err := v.Str(); err != nil || s != "imatrix" {
			return nil, fmt.Errorf("%s: general.type = %v, want \"imatrix\": %w", g.Path, v, ErrFormat)
		}
	}
	im := &Imatrix{Entries: map[string]*ImatrixEntry{}}
	if v, ok := g.Lookup("imatrix.datasets"); ok {
		ds, err := v.StringArray()
		if err != nil {
			return nil, fmt.Errorf("%s: imatrix.datasets: %w", g.Path, err)
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
	for _, t := range g.Tensors {
		base, ok := strings.CutSuffix(t.Name, ".in_sum2")
		if !ok {
			if _, isCount := strings.CutSuffix(t.Name, ".counts"); !isCount {
				return nil, fmt.Errorf("%s: tensor %s: neither <name>.in_sum2 nor <name>.counts: %w", g.Path, t.Name, ErrFormat)
			}
			continue
		}
		ct, err := g.Tensor(base + ".counts")
		if err != nil {
			return nil, fmt.Errorf("%s: %s has no %s.counts: %w (%w)", g.Path, t.Name, base, err, ErrFormat)
		}
		if t.Type != gguf.TypeF32 || ct.Type != gguf.TypeF32 {
			return nil, fmt.Errorf("%s: %s: in_sum2 and counts must be F32: %w", g.Path, base, ErrFormat)
		}
		nMat := int64(1)
		if len(t.Shape) == 2 {
			nMat = t.Shape[1]
		}
		if len(t.Shape) < 1 || len(t.Shape) > 2 || len(ct.Shape) < 1 || ct.Shape[0] != 1 || ct.Elements() != nMat {
			return nil, fmt.Errorf("%s: %s: in_sum2 shape %v and counts shape %v disagree (want [K, n] and [1, n]): %w", g.Path, base, t.Shape, ct.Shape, ErrFormat)
		}
		k := int(t.Shape[0])
		sums := make([]float32, t.Elements())
		if err := g.ReadRows(ctx, t, 0, sums); err != nil {
			return nil, err
		}
		counts := make([]float32, ct.Elements())
		if err := g.ReadRows(ctx, ct, 0, counts); err != nil {
			return nil, err
		}
		e := &ImatrixEntry{Name: base, K: k}
		for m := 0; m < int(nMat); m++ {
			row := make([]float64, k)
			for i := range row {
				row[i] = float64(sums[m*k+i])
				if row[i] < 0 || math.IsNaN(row[i]) || math.IsInf(row[i], 0) {
					return nil, fmt.Errorf("%s: %s.in_sum2[%d][%d] = %v: want a finite value >= 0: %w", g.Path, base, m, i, row[i], ErrFormat)
				}
			}
			c := float64(counts[m])
			if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
				return nil, fmt.Errorf("%s: %s.counts[%d] = %v: want a finite value >= 0: %w", g.Path, base, m, c, ErrFormat)
			}
			e.Sum2 = append(e.Sum2, row)
			e.Counts = append(e.Counts, c)
		}
		im.Entries[base] = e
	}
	return im, nil
}

// ParseLegacyImatrix reads llama.cpp's legacy .dat form (see the package doc). An MoE weight's values
// for all experts form one row of n_expert·K values (the file does not say K), so K is the value count.
func ParseLegacyImatrix(b []byte, name string) (*Imatrix, error) {
	r := bufio.NewReader(bytes.NewReader(b))
	left := int64(len(b))
	i32 := func(what string) (int32, error) {
		var v int32
		if err := binary.Read(r, binary.LittleEndian, &v); err != nil {
			return 0, fmt.Errorf("%s: %s: %w (truncated: %w)", name, what, err, ErrFormat)
		}
		left -= 4
		return v, nil
	}
	n, err := i32("entry count")
	if err != nil {
		return nil, err
	}
	if n < 1 || int64(n) > left/12 {
		return nil, fmt.Errorf("%s: entry count %d: want 1..%d for %d bytes: %w", name, n, left/12, len(b), ErrFormat)
	}
	im := &Imatrix{Entries: map[string]*ImatrixEntry{}}
	for i := 0; i < int(n); i++ {
		l, err := i32(fmt.Sprintf("entry %d name length", i))
		if err != nil {
			return nil, err
		}
		if l < 1 || int64(l) > left {
			return nil, fmt.Errorf("%s: entry %d name length %d: want 1..%d: %w", name, i, l, left, ErrFormat)
		}
		nb := make([]byte, l)
		if _, err := io.ReadFull(r, nb); err != nil {
			return nil, fmt.Errorf("%s: entry %d name: %w (%w)", name, i, err, ErrFormat)
		}
		left -= int64(l)
		tname := string(nb)
		if j := strings.IndexByte(tname, 0); j >= 0 { // llama.cpp reads it as a C string
			tname = tname[:j]
		}
		ncall, err := i32(fmt.Sprintf("entry %s ncall", tname))
		if err != nil {
			return nil, err
		}
		nval, err := i32(fmt.Sprintf("entry %s value count", tname))
		if err != nil {
			return nil, err
		}
		if nval < 1 || int64(nval) > left/4 {
			return nil, fmt.Errorf("%s: entry %s: %d values: want 1..%d: %w", name, tname, nval, left/4, ErrFormat)
		}
		if ncall < 0 {
			return nil, fmt.Errorf("%s: entry %s: ncall %d < 0: %w", name, tname, ncall, ErrFormat)
		}
		if _, dup := im.Entries[tname]; dup {
			return nil, fmt.Errorf("%s: entry %s appears twice: %w", name, tname, ErrFormat)
		}
		row := make([]float64, nval)
		var vb [4]byte
		for j := range row {
			if _, err := io.ReadFull(r, vb[:]); err != nil {
				return nil, fmt.Errorf("%s: entry %s value %d: %w (%w)", name, tname, j, err, ErrFormat)
			}
			v := math.Float32frombits(binary.LittleEndian.Uint32(vb[:]))
			if v < 0 || v != v || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("%s: entry %s value %d = %v: want finite >= 0: %w", name, tname, j, v, ErrFormat)
			}
			row[j] = float64(v)
		}
		left -= 4 * int64(nval)
		im.Entries[tname] = &ImatrixEntry{Name: tname, K: int(nval), Sum2: [][]float64{row}, Counts: []float64{float64(ncall)}}
	}
	if left == 0 {
		return im, nil
	}
	last, err := i32("last call count")
	if err != nil {
		return nil, err
	}
	dl, err := i32("dataset name length")
	if err != nil {
		return nil, err
	}
	if dl < 0 || int64(dl) != left {
		return nil, fmt.Errorf("%s: dataset name length %d, %d bytes left: %w", name, dl, left, ErrFormat)
	}
	ds := make([]byte, dl)
	if _, err := io.ReadFull(r, ds); err != nil {
		return nil, fmt.Errorf("%s: dataset name: %w (%w)", name, err, ErrFormat)
	}
	im.ChunkCount, im.Datasets = int(last), []string{string(ds)}
	return im, nil
}
