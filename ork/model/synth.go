package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// SyntheticSource is a WeightSource that generates a model of a given shape from a seed: weights are
// Gaussian with a heavy tail (a few outlier input channels scaled up, as trained LLM weights have),
// norms near 1. It exists to measure memory and speed at shapes (n_embd 5120) for which no model file is
// at hand; every call generates fresh tensors, so it holds nothing itself.
type SyntheticSource struct {
	Cfg  Config
	Seed uint64
}

// NewSyntheticSource validates cfg and returns the generator.
func NewSyntheticSource(cfg Config, seed uint64) (*SyntheticSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &SyntheticSource{Cfg: cfg, Seed: seed}, nil
}

// shape returns ne (K, N) of a tensor by name, or ok false. An MoE model (Cfg.NExpert > 0) has the
// router ffn_gate_inp and expert slices "blk.N.ffn_{gate,up,down}_exps.weight#<e>" instead of
// ffn_gate/up/down.
func (s *SyntheticSource) shape(name string) (k, n int, ok bool) {
	c := &s.Cfg
	base, e, isExpert, err := splitExpert(name)
	if err != nil || (isExpert && e >= c.NExpert) {
		return 0, 0, false
	}
	switch base {
	case "token_embd.weight", "output.weight":
		return c.NEmbd, c.NVocab, !isExpert
	case "output_norm.weight":
		return c.NEmbd, 1, !isExpert
	}
	rest, found := strings.CutPrefix(base, "blk.")
	if !found {
		return 0, 0, false
	}
	idx, suffix, found := strings.Cut(rest, ".")
	if l, err := strconv.Atoi(idx); !found || err != nil || l < 0 || l >= c.NLayer {
		return 0, 0, false
	}
	if isExpert {
		switch suffix {
		case "ffn_gate_exps.weight", "ffn_up_exps.weight":
			return c.NEmbd, c.NFF, true
		case "ffn_down_exps.weight":
			return c.NFF, c.NEmbd, true
		}
		return 0, 0, false
	}
	switch suffix {
	case "attn_norm.weight", "ffn_norm.weight":
		return c.NEmbd, 1, true
	case "attn_q.weight":
		return c.NEmbd, c.QDim(), true
	case "attn_k.weight", "attn_v.weight":
		return c.NEmbd, c.KVDim(), true
	case "attn_output.weight":
		return c.QDim(), c.NEmbd, true
	case "ffn_gate_inp.weight":
		return c.NEmbd, c.NExpert, c.MoE()
	case "ffn_gate.weight", "ffn_up.weight":
		return c.NEmbd, c.NFF, !c.MoE()
	case "ffn_down.weight":
		return c.NFF, c.NEmbd, !c.MoE()
	}
	return 0, 0, false
}

func (s *SyntheticSource) rng(name string) *rand.Rand {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return rand.New(rand.NewPCG(s.Seed, h))
}

// Vector implements WeightSource.
func (s *SyntheticSource) Vector(_ context.Context, name string) ([]float32, bool, error) {
	k, n, ok := s.shape(name)
	if !ok || n != 1 {
		return nil, false, nil
	}
	r := s.rng(name)
	v := make([]float32, k)
	for i := range v {
		v[i] = float32(1 + 0.1*r.NormFloat64())
	}
	return v, true, nil
}

func (s *SyntheticSource) matrix(name string, k, n int) []float32 {
	r := s.rng(name)
	w := make([]float32, n*k)
	std := 1 / math.Sqrt(float64(k))
	outlier := make([]float32, k)
	for j := range outlier {
		outlier[j] = 1
		if r.IntN(256) == 0 { // ~0.4% of input channels carry 8x larger weights
			outlier[j] = 8
		}
	}
	for i := range w {
		x := r.NormFloat64() * std
		if r.IntN(64) == 0 { // heavy tail
			x *= 4
		}
		w[i] = float32(x) * outlier[i%k]
	}
	return w
}

// Linear implements WeightSource.
func (s *SyntheticSource) Linear(_ context.Context, name string) (Linear, bool, error) {
	k, n, ok := s.shape(name)
	if !ok || n == 1 {
		return nil, false, nil
	}
	d, err := NewDense(n, k, s.matrix(name, k, n), nil)
	return d, err == nil, err
}

// Rows implements WeightSource (it generates the whole tensor; use small vocabularies).
func (s *SyntheticSource) Rows(_ context.Context, name string, rows []int32, dst []float32) error {
	k, n, ok := s.shape(name)
	if !ok || n == 1 {
		return fmt.Errorf("synthetic model: no matrix %s: %w", name, ErrBadModel)
	}
	w := s.matrix(name, k, n)
	for i, r := range rows {
		if r < 0 || int(r) >= n {
			return fmt.Errorf("synthetic model: %s row %d outside [0, %d): %w", name, r, n, ErrBadModel)
		}
		copy(dst[i*k:(i+1)*k], w[int(r)*k:(int(r)+1)*k])
	}
	return nil
}
