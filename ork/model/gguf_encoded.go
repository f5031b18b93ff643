package model

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"

	"orkpipe/internal/hugebuf"
	"orkpipe/ork/gguf"
)

// encoded reads the source bytes of tensor t (or of expert e of a three-dimensional expert tensor
// [K, N, n_expert]: rows [e·N, (e+1)·N)) into an Encoded Linear, wrapped for GGMLActivations.
func (s *GGUFSource) encoded(ctx context.Context, t gguf.TensorInfo, e int, isExpert bool) (Linear, error) {
	var first int64
	switch {
	case isExpert && len(t.Shape) != 3:
		return nil, fmt.Errorf("%s: tensor %s: shape %v: expert %d asked of a tensor that is not three-dimensional [K, N, n_expert]: %w",
			s.f.Path, t.Name, t.Shape, e, ErrBadModel)
	case isExpert && int64(e) >= t.Shape[2]:
		return nil, fmt.Errorf("%s: tensor %s: expert %d outside [0, %d): %w", s.f.Path, t.Name, e, t.Shape[2], ErrBadModel)
	case isExpert:
		first = int64(e) * t.Shape[1]
	case len(t.Shape) != 2:
		return nil, fmt.Errorf("%s: tensor %s: shape %v, want two dimensions [K, N]: %w", s.f.Path, t.Name, t.Shape, ErrBadModel)
	}
	n, k := t.Shape[1], t.Shape[0]
	if k%int64(t.Type.BlockSize()) != 0 {
		return nil, fmt.Errorf("%s: tensor %s: %s rows of %d values are not whole blocks of %d: %w", s.f.Path, t.Name, t.Type, k, t.Type.BlockSize(), ErrBadModel)
	}
	l, err := s.encodedBytes(ctx, t, first, n, k)
	if err != nil {
		return nil, err
	}
	if s.GGMLActivations && ggmlActivationRounding(t.Type) {
		return &ggmlActLinear{Linear: l, typ: t.Type}, nil
	}
	return l, nil
}

// blockWeightType returns the widest encoding a KeepEncoded source holds a block matmul weight of f in
// (every tensor "blk.*" of two or more dimensions but the MoE router ffn_gate_inp and the convolution
// kernels ssm_conv1d and shortconv.conv, which are not matmul weights): the tensor's type when
// KeepsEncoded, else F32. A file without block weights gives F32.
func blockWeightType(f *gguf.File) gguf.Type {
	widest, found := gguf.TypeF32, false
	for _, t := range f.Tensors {
		if !strings.HasPrefix(t.Name, "blk.") || len(t.Shape) < 2 || strings.Contains(t.Name, ".ffn_gate_inp.") ||
			strings.Contains(t.Name, ".ssm_conv1d.") || strings.Contains(t.Name, ".shortconv.conv.") {
			continue
		}
		held := t.Type
		if !KeepsEncoded(held) {
			held = gguf.TypeF32
		}
		// bytes per value: BlockBytes / BlockSize, compared without division
		if !found || held.BlockBytes()*widest.BlockSize() > widest.BlockBytes()*held.BlockSize() {
			widest, found = held, true
		}
	}
	return widest
}

// ggmlExact reads tensor t (or expert e of it) into a ggml-exact Linear (ggml_mul_mat_id's products for
// an expert slice).
func (s *GGUFSource) ggmlExact(ctx context.Context, t gguf.TensorInfo, e int, isExpert bool) (Linear, error) {
	if !ggmlExactType(t.Type) {
		return nil, fmt.Errorf("%s: tensor %s: type %s: %w (ggml-exact products are implemented for Q8_0, F16 and F32 weights)", s.f.Path, t.Name, t.Type, ErrUnsupported)
	}
	var first int64
	switch {
	case isExpert && (len(t.Shape) != 3 || int64(e) >= t.Shape[2]):
		return nil, fmt.Errorf("%s: tensor %s: shape %v: no expert %d: %w", s.f.Path, t.Name, t.Shape, e, ErrBadModel)
	case isExpert:
		first = int64(e) * t.Shape[1]
	case len(t.Shape) != 2:
		return nil, fmt.Errorf("%s: tensor %s: shape %v, want two dimensions [K, N]: %w", s.f.Path, t.Name, t.Shape, ErrBadModel)
	}
	n, k := t.Shape[1], t.Shape[0]
	raw := make([]byte, n*t.RowBytes())
	if err := s.f.ReadRaw(ctx, t, first, raw); err != nil {
		return nil, err
	}
	l, err := newGGMLMatmul(t.Type, int(n), int(k), raw, isExpert)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", s.f.Path, t.Name, err)
	}
	return l, nil
}

// encodedBytes returns rows [first, first+n) of tensor t (n rows of k values) as an Encoded: its bytes
// mapped from the file (MapEncoded, where files can be mapped and the model was opened from one: an
// *os.File under gguf.Open), else read into the Go heap.
func (s *GGUFSource) encodedBytes(ctx context.Context, t gguf.TensorInfo, first, n, k int64) (*Encoded, error) {
	size := n * t.RowBytes()
	if osf, isFile := s.f.ReaderAt().(*os.File); s.MapEncoded && canMapTensors && isFile {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start, _ := s.f.DataRange(t)
		raw, unmap, err := mapTensorBytes(osf, s.f.Path, s.f.Size, start+first*t.RowBytes(), size)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		l, err := NewEncoded(t.Type, int(n), int(k), raw)
		if err != nil {
			unmap()
			return nil, fmt.Errorf("%s: tensor %s: %w", s.f.Path, t.Name, err)
		}
		unreserve := hugebuf.Reserve(size)
		var done atomic.Bool
		l.mapped = true
		l.free = func() {
			if !done.Swap(true) {
				unmap()
				unreserve()
			}
		}
		runtime.AddCleanup(l, func(free func()) { free() }, l.free)
		return l, nil
	}
	raw := make([]byte, size)
	if err := s.f.ReadRaw(ctx, t, first, raw); err != nil {
		return nil, err
	}
	l, err := NewEncoded(t.Type, int(n), int(k), raw)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", s.f.Path, t.Name, err)
	}
	return l, nil
}
