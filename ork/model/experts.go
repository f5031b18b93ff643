package model

import (
	"context"
	"fmt"
	"strings"

	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// splitExpert splits an expert slice name "<tensor>#<e>" (pack.ExpertName: how orkpacks name expert
// entries, and how WeightSource.Linear accepts them) into the tensor and e; isExpert is false for a name
// without '#'. A '#' not followed by a canonical decimal index is an error.
func splitExpert(name string) (tensor string, e int, isExpert bool, err error) {
	if !strings.Contains(name, "#") {
		return name, 0, false, nil
	}
	tensor, e, ok := pack.SplitExpert(name)
	if !ok {
		return "", 0, false, fmt.Errorf("weight name %q: want <tensor>#<expert> with a decimal expert index: %w", name, ErrBadModel)
	}
	return tensor, e, true, nil
}

// loadExpert reads expert e of the three-dimensional tensor t ([K, N, n_expert]) as N rows of K values,
// caching it under its expert name like load caches whole tensors.
func (s *GGUFSource) loadExpert(ctx context.Context, t gguf.TensorInfo, e int) ([]float32, error) {
	if len(t.Shape) != 3 {
		return nil, fmt.Errorf("%s: tensor %s: shape %v: expert %d asked of a tensor that is not three-dimensional [K, N, n_expert]: %w",
			s.f.Path, t.Name, t.Shape, e, ErrBadModel)
	}
	if int64(e) >= t.Shape[2] {
		return nil, fmt.Errorf("%s: tensor %s: expert %d outside [0, %d): %w", s.f.Path, t.Name, e, t.Shape[2], ErrBadModel)
	}
	key := pack.ExpertName(t.Name, e)
	s.mu.Lock()
	v, ok := s.cached[key]
	s.mu.Unlock()
	if ok {
		return v, nil
	}
	n := t.Shape[1]
	v = make([]float32, n*t.Shape[0])
	if err := s.f.ReadRows(ctx, t, int64(e)*n, v); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.used+4*int64(len(v)) <= s.limit {
		s.cached[key] = v
		s.used += 4 * int64(len(v))
	}
	s.mu.Unlock()
	return v, nil
}
