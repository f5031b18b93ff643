package quant

import (
	"context"
	"fmt"
	"math"
)

// RowReader reads the rows of a float weight: ReadRows fills dst, a whole number of rows, with
// the rows from first on. It is called from several goroutines at once.
type RowReader interface {
	ReadRows(ctx context.Context, first int, dst []float32) error
}

// CodeSink takes the codes of the rows [first, first+len(codes)/KP) of a weight, row-major [rows][KP],
// as RTNStreamTo produces them. It is called from several goroutines at once, for different rows;
// codes are valid only during the call. An error stops the quantization and is returned.
type CodeSink func(first int, codes []int8) error

// RTNStream is RTN without a Hessian — or RTNImportance when importance is not nil — of the
// N x K weight name whose rows r reads. The workers read, check (finite values) and, with
// WithRotation, rotate a few rows at a time (at most about 1 MiB each), so the float weight is
// never held whole: a streamed weight costs its codes and scales. The result is identical to
// RTN's (RTNImportance's) of the same rows.
func RTNStream(ctx context.Context, name string, n, k int, r RowReader, importance []float64, opts ...Option) (*Weight, error) {
	return rtnStream(ctx, name, n, k, r, importance, nil, opts)
}

// RTNStreamTo is RTNStream handing the codes to sink as they are made (every row exactly once, a
// few rows at a time) instead of keeping them: the Weight it returns has no Codes, and a streamed
// weight costs only its scales. The codes and everything else are RTNStream's.
func RTNStreamTo(ctx context.Context, name string, n, k int, r RowReader, importance []float64, sink CodeSink, opts ...Option) (*Weight, error) {
	if sink == nil {
		return nil, fmt.Errorf("%s: RTNStreamTo without a sink: %w", name, ErrParam)
	}
	return rtnStream(ctx, name, n, k, r, importance, sink, opts)
}

func rtnStream(ctx context.Context, name string, n, k int, r RowReader, importance []float64, sink CodeSink, opts []Option) (*Weight, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if n <= 0 || k <= 0 {
		return nil, fmt.Errorf("%s: dimensions %dx%d: %w (want positive rows and cols)", name, n, k, ErrShape)
	}
	if importance != nil {
		if c.rotate {
			return nil, fmt.Errorf("%s: importance weighting with a rotation: the rotated diag(H) needs off-diagonal terms: %w", name, ErrParam)
		}
		if err := checkImportance(name, importance, k); err != nil {
			return nil, err
		}
	}
	w := &Weight{N: n, K: k, KP: k, Bits: c.bits, Group: c.group}
	if c.rotate {
		if w.Rotation, err = NewRotationMinBlock(k, c.signs, c.seed, c.minBlock); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		w.KP = w.Rotation.Padded
	}
	if sink == nil {
		w.Codes = make([]int8, w.N*w.KP)
	}
	w.Scales = make([]float32, w.N*w.Groups())
	rows := func(ctx context.Context, lo, hi int, scratch *[]float32) ([]float32, error) {
		nr := hi - lo
		need := nr * k
		if c.rotate {
			need += nr * w.KP
		}
		if cap(*scratch) < need {
			*scratch = make([]float32, need)
		}
		raw := (*scratch)[:nr*k]
		if err := r.ReadRows(ctx, lo, raw); err != nil {
			return nil, err
		}
		if nonFinite(raw) {
			for i, v := range raw {
				if math.Float32bits(v)&0x7f800000 == 0x7f800000 { // ±Inf or NaN
					return nil, fmt.Errorf("value %v at row %d col %d: %w", v, lo+i/k, i%k, ErrNotFinite)
				}
			}
		}
		if !c.rotate {
			return raw, nil
		}
		rot := (*scratch)[nr*k : need]
		if err := w.Rotation.Apply(rot, raw, nr); err != nil {
			return nil, err
		}
		return rot, nil
	}
	if err := rtnRows(ctx, w, rows, importance, c, sink); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return w, nil
}
