package model

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"orkpipe/ork/gguf"
)

// GGUFSource is a WeightSource reading (and dequantizing) tensors of a GGUF file on demand. With a
// cache limit, tensors are kept in memory after the first read until the limit is reached, so a small
// model is read once; without one, every read goes to the file (a layer at a time for big models).
type GGUFSource struct {
	f     *gguf.File
	limit int64
	// GGMLActivations rounds the input of every Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/F16/BF16 matrix as ggml's CPU
	// backend does (see ggmlActLinear), so quantized GGUF files evaluate as llama-perplexity measures them.
	// Other types (F32, K-quants) get float32 inputs.
	GGMLActivations bool
	// GGMLExact makes Linear return ggml-exact Linears (Q8_0, F16 and F32 weights; other types are an
	// error): each product is computed as ggml's CPU backend computes it, input rounding and summation
	// order included (ggmlMatmul), so a Model with GGMLExact reproduces llama.cpp's figures. It takes
	// precedence over GGMLActivations and KeepEncoded.
	GGMLExact bool
	// KeepEncoded makes Linear return the matmul weights whose type KeepsEncoded reports (quantized,
	// F16, BF16) as an [Encoded] Linear holding the tensor's source bytes, read whole and never cached,
	// instead of a float32 Dense: a quarter to a half of the memory, the same results, a dequantization
	// of each row block per Apply. F32 and F64 weights stay Dense.
	KeepEncoded bool
	// MapEncoded makes KeepEncoded's Encoded weights read-only mappings of the file (the page cache's
	// own pages, no copy, through the descriptor gguf.Open opened; a File from gguf.Parse reads) where
	// files can be mapped, instead of copies on the Go heap: a layer of a few hundred MiB then costs no
	// fresh memory, which on a host with expensive page faults (a PVM guest: ~35 µs a 4 KiB page) was
	// most of a 27B layer's load (docs/performance-log.md, "Calibration, session 12"). The mapped bytes count against the process's memory limit as the heap copy did
	// (hugebuf.Reserve). A file truncated under a mapping makes the weight's Apply fail with an error
	// naming the fault, not crash. The caller releases each layer with Layer.Release once it is done
	// with it; a weight never released is unmapped when the collector finds it unreachable.
	MapEncoded bool

	mu     sync.Mutex
	cached map[string][]float32
	used   int64
}

// NewGGUFSource returns a WeightSource over f keeping up to cacheBytes of dequantized tensors.
func NewGGUFSource(f *gguf.File, cacheBytes int64) *GGUFSource {
	return &GGUFSource{f: f, limit: cacheBytes, cached: map[string][]float32{}}
}

// File returns the underlying file.
func (s *GGUFSource) File() *gguf.File { return s.f }

func (s *GGUFSource) load(ctx context.Context, t gguf.TensorInfo) ([]float32, error) {
	s.mu.Lock()
	v, ok := s.cached[t.Name]
	s.mu.Unlock()
	if ok {
		return v, nil
	}
	v = make([]float32, t.Elements())
	if err := s.f.ReadRows(ctx, t, 0, v); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.used+4*int64(len(v)) <= s.limit {
		s.cached[t.Name] = v
		s.used += 4 * int64(len(v))
	}
	s.mu.Unlock()
	return v, nil
}

func (s *GGUFSource) tensor(name string) (gguf.TensorInfo, bool, error) {
	t, err := s.f.Tensor(name)
	if errors.Is(err, gguf.ErrTensorNotFound) {
		return t, false, nil
	}
	return t, err == nil, err
}

// Vector implements WeightSource.
func (s *GGUFSource) Vector(ctx context.Context, name string) ([]float32, bool, error) {
	t, ok, err := s.tensor(name)
	if !ok {
		return nil, false, err
	}
	if len(t.Shape) != 1 {
		return nil, false, fmt.Errorf("%s: tensor %s: shape %v, want one dimension: %w", s.f.Path, name, t.Shape, ErrBadModel)
	}
	v, err := s.load(ctx, t)
	return v, err == nil, err
}

// Linear implements WeightSource. A name "<tensor>#<e>" (the orkpack name of an expert slice) returns
// expert e of a three-dimensional expert tensor [K, N, n_expert]: rows [e·N, (e+1)·N) of it, read alone.
func (s *GGUFSource) Linear(ctx context.Context, name string) (Linear, bool, error) {
	base, expert, isExpert, err := splitExpert(name)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", s.f.Path, err)
	}
	t, ok, err := s.tensor(base)
	if !ok {
		return nil, false, err
	}
	if s.GGMLExact {
		l, err := s.ggmlExact(ctx, t, expert, isExpert)
		return l, err == nil, err
	}
	if s.KeepEncoded && KeepsEncoded(t.Type) {
		l, err := s.encoded(ctx, t, expert, isExpert)
		return l, err == nil, err
	}
	var w []float32
	if isExpert {
		if w, err = s.loadExpert(ctx, t, expert); err != nil {
			return nil, false, err
		}
	} else {
		if len(t.Shape) != 2 {
			return nil, false, fmt.Errorf("%s: tensor %s: shape %v, want two dimensions [K, N]: %w", s.f.Path, name, t.Shape, ErrBadModel)
		}
		if w, err = s.load(ctx, t); err != nil {
			return nil, false, err
		}
	}
	d, err := NewDense(int(t.Shape[1]), int(t.Shape[0]), w, nil)
	if err != nil {
		return nil, false, fmt.Errorf("%s: tensor %s: %w", s.f.Path, name, err)
	}
	if s.GGMLActivations && ggmlActivationRounding(t.Type) {
		return &ggmlActLinear{Linear: d, typ: t.Type}, true, nil
	}
	return d, true, nil
}

// Rows implements WeightSource.
func (s *GGUFSource) Rows(ctx context.Context, name string, rows []int32, dst []float32) error {
	t, err := s.f.Tensor(name)
	if err != nil {
		return err
	}
	if len(t.Shape) != 2 || len(dst) != len(rows)*int(t.Shape[0]) {
		return fmt.Errorf("%s: tensor %s: shape %v: cannot read %d rows into %d values: %w", s.f.Path, name, t.Shape, len(rows), len(dst), ErrBadModel)
	}
	k := int(t.Shape[0])
	s.mu.Lock()
	all, ok := s.cached[name]
	fits := 4*t.Elements() <= s.limit-s.used
	s.mu.Unlock()
	if !ok && fits {
		if all, err = s.load(ctx, t); err != nil {
			return err
		}
		ok = true
	}
	for i, r := range rows {
		if r < 0 || int64(r) >= t.Shape[1] {
			return fmt.Errorf("%s: tensor %s: row %d outside [0, %d): %w", s.f.Path, name, r, t.Shape[1], ErrBadModel)
		}
		if ok {
			copy(dst[i*k:(i+1)*k], all[int(r)*k:])
			continue
		}
		if err := s.f.ReadRows(ctx, t, int64(r), dst[i*k:(i+1)*k]); err != nil {
			return err
		}
	}
	return nil
}

// OpenGGUF opens a model file and returns a model (whose Src is a *GGUFSource caching up to cacheBytes
// of dequantized tensors), its tokenizer and the file, which the caller closes.
func OpenGGUF(ctx context.Context, path string, cacheBytes int64) (*Model, Tokenizer, *gguf.File, error) {
	f, err := gguf.Open(ctx, path)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg, err := ConfigFromGGUF(f)
	if err == nil {
		err = cfg.CheckTensors(f)
	}
	if err == nil {
		var tok Tokenizer
		if tok, err = TokenizerFromGGUF(f); err == nil {
			var m *Model
			if m, err = NewModel(cfg, NewGGUFSource(f, cacheBytes)); err == nil {
				return m, tok, f, nil
			}
		}
	}
	f.Close()
	return nil, nil, nil, err
}
