package model

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// A forward pass checks what it makes for values that are not finite numbers: the embeddings of the
// tokens, each block's output, the logits. The checks read each value once (a block's output is a
// few MiB against the hundreds of MiB of weights the block reads), and the first NaN or infinity stops
// the pass with ErrNotFinite, naming where it appeared and, found only then by reading the tensors
// involved again, the first weight that holds one: a source converted with values beyond binary16 (an
// F16 file of a BF16 model), a corrupt download, a pack whose scales overflow. Without the checks a
// NaN reached the perplexity (printed as NaN, refused by JSON) or a Hessian (refused at its write,
// naming neither the layer nor the weight).

// NonFinite is a value that is not a finite number in a tensor of a weight source.
type NonFinite struct {
	File   string // the source file
	Tensor string
	Index  int64 // element index, row-major: row Index / RowLen, column Index % RowLen
	RowLen int64 // ne[0]
	Value  float32
}

func (n NonFinite) String() string {
	return fmt.Sprintf("tensor %s of %s holds %v at row %d, column %d", n.Tensor, n.File, n.Value, n.Index/n.RowLen, n.Index%n.RowLen)
}

// nonFiniteFinder is a WeightSource that can look through its tensors for a value that is not finite.
type nonFiniteFinder interface {
	// firstNonFinite reads the tensors whose names match, in file order, and returns the first
	// non-finite value; found is false when they hold none.
	firstNonFinite(ctx context.Context, match func(name string) bool) (nf NonFinite, found bool, err error)
}

// firstNonFinite returns the index of the first NaN or infinity in v, or -1.
func firstNonFinite(v []float32) int {
	for i, x := range v {
		if x-x != 0 { // NaN - NaN and Inf - Inf are NaN; x - x is 0 for every finite x
			return i
		}
	}
	return -1
}

// notFinite is the error for value v[i] of what, rows of rowLen values (of unit) made by the tensors
// match selects: where it appeared and the first non-finite weight of those tensors, or that they hold
// none.
func (m *Model) notFinite(ctx context.Context, what string, v []float32, i, rowLen int, unit, where string, match func(string) bool) error {
	at := fmt.Sprintf("%v in %s at %s, %s %d", v[i], what, where, unit, i%rowLen)
	f, ok := m.Src.(nonFiniteFinder)
	if !ok {
		return fmt.Errorf("%s: %w", at, ErrNotFinite)
	}
	nf, found, err := f.firstNonFinite(ctx, match)
	switch {
	case err != nil:
		return fmt.Errorf("%s (reading its weights for the cause: %v): %w", at, err, ErrNotFinite)
	case found:
		return fmt.Errorf("%s: %s: %w", at, nf, ErrNotFinite)
	}
	return fmt.Errorf("%s, and the weights that made it hold no NaN or infinity, so a value overflowed in the computation: %w", at, ErrNotFinite)
}

// tokenAt says where row r of hidden states of sequences of seqLen rows is.
func tokenAt(r, seqLen int) string {
	if seqLen <= 0 || r < seqLen {
		return fmt.Sprintf("position %d", r)
	}
	return fmt.Sprintf("position %d of sequence %d", r%seqLen, r/seqLen)
}

// blockTensors selects the tensors of block i.
func blockTensors(i int) func(string) bool {
	prefix := fmt.Sprintf("blk.%d.", i)
	return func(name string) bool { return strings.HasPrefix(name, prefix) }
}

// firstNonFinite implements nonFiniteFinder: tensors are read (and dequantized) a bounded number of rows
// at a time; a tensor of a type orkpipe cannot dequantize is skipped (the forward pass could not have
// read it either).
func (s *GGUFSource) firstNonFinite(ctx context.Context, match func(string) bool) (NonFinite, bool, error) {
	const chunk = 1 << 18 // values a read, 1 MiB
	var buf []float32
	for _, t := range s.f.Tensors {
		if !match(t.Name) || !gguf.CanDequantize(t.Type) {
			continue
		}
		k := t.RowLen()
		rows := t.Elements() / max(k, 1)
		per := max(1, chunk/k)
		for r := int64(0); r < rows; r += per {
			n := min(per, rows-r)
			if int64(cap(buf)) < n*k {
				buf = make([]float32, n*k)
			}
			b := buf[:n*k]
			if err := s.f.ReadRows(ctx, t, r, b); err != nil {
				return NonFinite{}, false, err
			}
			if i := firstNonFinite(b); i >= 0 {
				return NonFinite{File: s.f.Path, Tensor: t.Name, Index: r*k + int64(i), RowLen: k, Value: b[i]}, true, nil
			}
		}
	}
	return NonFinite{}, false, nil
}

// firstNonFinite implements nonFiniteFinder over the float model's tensors the pack does not replace. The
// pack's entries are not read again: their scales are checked finite as they load (an F16 entry's values
// are not).
func (s *PackSource) firstNonFinite(ctx context.Context, match func(string) bool) (NonFinite, bool, error) {
	f, ok := s.Float.(nonFiniteFinder)
	if !ok {
		return NonFinite{}, false, nil
	}
	return f.firstNonFinite(ctx, func(name string) bool {
		if !match(name) {
			return false
		}
		_, err := s.Pack.Entry(name)
		return errors.Is(err, pack.ErrNotFound)
	})
}
