package quant

import (
	"context"
	"fmt"
	"iter"
	"sync"
)

// Report is the result of EvaluateAll: per-scheme means over the tensors, then every tensor.
type Report struct {
	Schemes []SchemeError `json:"schemes"`
	Tensors []TensorError `json:"tensors"`
}

// ActivationSource returns the activation rows (tokens x k) to evaluate the named weight on. It
// is the seam for real activations: SpikedSource synthesises them; ork/calib can capture them.
type ActivationSource func(ctx context.Context, weight string, k int) (Matrix, error)

// SpikedSource returns an ActivationSource of SpikedActivations(tokens, k, seed), one set per
// K shared by every weight of that width.
func SpikedSource(tokens int, seed uint64) ActivationSource {
	var mu sync.Mutex
	cache := map[int]Matrix{}
	return func(_ context.Context, _ string, k int) (Matrix, error) {
		mu.Lock()
		defer mu.Unlock()
		if m, ok := cache[k]; ok {
			return m, nil
		}
		m, err := SpikedActivations(tokens, k, seed)
		if err != nil {
			return Matrix{}, err
		}
		cache[k] = m
		return m, nil
	}
}

// EvaluateAll runs EvaluateTensor on each weight the sequence yields (one at a time: only one
// weight is held in memory) with activations from acts, and averages every scheme over them.
// calib, when not nil, supplies the GPTQ calibration set (held out from acts); nil calibrates
// on acts itself.
func EvaluateAll(ctx context.Context, weights iter.Seq2[Matrix, error], acts, calib ActivationSource, cfg EvalConfig) (*Report, error) {
	rep := &Report{}
	for w, err := range weights {
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		x, err := acts(ctx, w.Name, w.Cols)
		if err != nil {
			return nil, fmt.Errorf("%s: activations: %w", w.Name, err)
		}
		c := cfg
		if calib != nil {
			cx, err := calib(ctx, w.Name, w.Cols)
			if err != nil {
				return nil, fmt.Errorf("%s: calibration activations: %w", w.Name, err)
			}
			c.Calib = &cx
		}
		te, err := EvaluateTensor(ctx, w, x, c)
		if err != nil {
			return nil, err
		}
		rep.Tensors = append(rep.Tensors, te)
	}
	if len(rep.Tensors) == 0 {
		return nil, fmt.Errorf("no weights to evaluate: %w", ErrParam)
	}
	rep.Schemes = MeanErrors(rep.Tensors)
	return rep, nil
}
