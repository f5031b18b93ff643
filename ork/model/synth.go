package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
)

// SyntheticSource is a WeightSource that generates a model of a given shape from a seed: weights are
// Gaussian with a heavy tail (a few outlier input channels scaled up, as trained LLM weights have),
// norms near 1, and for the hybrid architectures DeltaNet decays ssm_a near −1 (negative, so the
// recurrence decays). It exists to measure memory and speed at shapes (n_embd 5120) for which no model
// file is at hand; every call generates fresh tensors, so it holds nothing but the list of tensor
// shapes ([Config.Tensors]).
type SyntheticSource struct {
	Cfg  Config
	Seed uint64

	once   sync.Once
	shapes map[string]TensorSpec
}

// NewSyntheticSource validates cfg and returns the generator.
func NewSyntheticSource(cfg Config, seed uint64) (*SyntheticSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &SyntheticSource{Cfg: cfg, Seed: seed}, nil
}

// shape returns ne (K, N) of a tensor by name (N = 1 for a vector), or ok false: a tensor of
// Cfg.Tensors, or an expert slice "<tensor>#<e>" of an expert tensor (a whole expert tensor is not a
// matrix).
func (s *SyntheticSource) shape(name string) (k, n int, ok bool) {
	s.once.Do(func() {
		s.shapes = map[string]TensorSpec{}
		for _, t := range s.Cfg.Tensors() {
			s.shapes[t.Name] = t
		}
	})
	base, e, isExpert, err := splitExpert(name)
	if err != nil {
		return 0, 0, false
	}
	t, found := s.shapes[base]
	switch {
	case !found:
		return 0, 0, false
	case isExpert:
		if len(t.Shape) != 3 || e >= t.Shape[2] {
			return 0, 0, false
		}
		return t.Shape[0], t.Shape[1], true
	case len(t.Shape) == 1:
		return t.Shape[0], 1, true
	case len(t.Shape) == 2:
		return t.Shape[0], t.Shape[1], true
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
	sign := float32(1)
	if strings.HasSuffix(name, ".ssm_a") { // A = −exp(A_log) < 0: the DeltaNet state decays
		sign = -1
	}
	for i := range v {
		v[i] = sign * float32(1+0.1*r.NormFloat64())
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
