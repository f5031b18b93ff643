package quant

import (
	"context"
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// Scheme names reported by EvaluateTensor, in report order.
const (
	SchemeW4A4PC          = "w4a4-pc"           // int4 per channel, int4 activations
	SchemeW4A4G32         = "w4a4-g32"          // int4 groups of 32, int4 activations
	SchemeW4A4G32Rot      = "w4a4-g32-rot"      // + Hadamard rotation
	SchemeW4A8G32Rot      = "w4a8-g32-rot"      // rotated, int8 activations
	SchemeW4A8G32RotGPTQ  = "w4a8-g32-rot-gptq" // + GPTQ (Hessian from the activation set)
	SchemeQ4_0            = "q4_0"              // ggml Q4_0 weights, Q8_0 activations
	SchemeQ4K             = "q4_k"              // ggml Q4_K weights, Q8_K activations
	SchemeQ8_0            = "q8_0"              // ggml Q8_0 weights, Q8_0 activations
	SchemeW8A8PC          = "w8a8-pc"           // int8 per channel, int8 activations
	defaultActivationSeed = 1
)

// Schemes lists every scheme EvaluateTensor reports, in order.
var Schemes = []string{SchemeW4A4PC, SchemeW4A4G32, SchemeW4A4G32Rot, SchemeW4A8G32Rot, SchemeW4A8G32RotGPTQ,
	SchemeQ4_0, SchemeQ4K, SchemeQ8_0, SchemeW8A8PC}

// SchemeError is one scheme's error on one tensor (or averaged over tensors).
type SchemeError struct {
	Scheme       string  `json:"scheme"`
	WeightRelErr float64 `json:"weight_rel_err"` // ||W - Ŵ||_F / ||W||_F
	MatmulRelErr float64 `json:"matmul_rel_err"` // ||Ŷ - Y||_F / ||Y||_F, Y = X·Wᵀ in float64
}

// TensorError is every scheme's error on one weight.
type TensorError struct {
	Name    string        `json:"name"`
	N       int           `json:"n"`
	K       int           `json:"k"`
	Schemes []SchemeError `json:"schemes"`
}

// EvalConfig configures EvaluateTensor.
type EvalConfig struct {
	ActClip float64 // activation clip ratio for the w*a* schemes (0 means DefaultActClip)
	Workers int     // goroutines (0 means 1)
	Seed    uint64  // seeds the rotation signs
	// Calib, when set, is the activation set (tokens x K) the GPTQ scheme's Hessian is built
	// from, so that GPTQ is scored on activations it did not see; by default the Hessian comes
	// from the evaluation set itself (in-sample).
	Calib *Matrix
}

// EvaluateTensor quantizes w with every scheme and measures its weight error and its matmul
// error on the activation rows acts (tokens x K) against a float64 reference. The w*a* schemes
// run the integer kernel (MatMulInt) on per-token quantized activations; the ggml schemes
// multiply dequantized weights by activations fake-quantized the way ggml's CPU matmul does
// (Q8_0 blocks for Q4_0/Q8_0, Q8_K blocks for Q4_K). Rows whose length is not a multiple of the
// ggml block are zero-padded to it (a zero pad does not change any block's scale; llama.cpp
// itself refuses such rows). The GPTQ scheme's Hessian is accumulated from acts (in-sample) or
// from cfg.Calib. The activation set is the caller's: synthetic
// (SpikedActivations) or captured by ork/calib.
func EvaluateTensor(ctx context.Context, w Matrix, acts Matrix, cfg EvalConfig) (TensorError, error) {
	if err := w.Validate(); err != nil {
		return TensorError{}, err
	}
	if err := acts.Validate(); err != nil {
		return TensorError{}, err
	}
	if acts.Cols != w.Cols {
		return TensorError{}, fmt.Errorf("%s: activations have %d columns, weight has K=%d: %w", w.Name, acts.Cols, w.Cols, ErrShape)
	}
	clip := cfg.ActClip
	if clip == 0 {
		clip = DefaultActClip
	}
	workers := max(1, cfg.Workers)
	ref := matmulF64(acts.Data, acts.Rows, w.Data, w.Rows, w.Cols)
	calib := acts
	if cfg.Calib != nil {
		calib = *cfg.Calib
		if err := calib.Validate(); err != nil {
			return TensorError{}, err
		}
		if calib.Cols != w.Cols {
			return TensorError{}, fmt.Errorf("%s: calibration activations have %d columns, weight has K=%d: %w", w.Name, calib.Cols, w.Cols, ErrShape)
		}
	}
	h := NewHessian(w.Cols)
	if err := h.Add(calib.Data, calib.Rows); err != nil {
		return TensorError{}, err
	}
	out := TensorError{Name: w.Name, N: w.Rows, K: w.Cols}
	own := []struct {
		name       string
		bits, abit int
		group      int
		rot, gptq  bool
	}{
		{SchemeW4A4PC, 4, 4, 0, false, false},
		{SchemeW4A4G32, 4, 4, 32, false, false},
		{SchemeW4A4G32Rot, 4, 4, 32, true, false},
		{SchemeW4A8G32Rot, 4, 8, 32, true, false},
		{SchemeW4A8G32RotGPTQ, 4, 8, 32, true, true},
	}
	for _, s := range own {
		opts := []Option{WithBits(s.bits), WithGroup(s.group), WithWorkers(workers)}
		if s.rot {
			opts = append(opts, WithRotation(true, cfg.Seed))
		}
		var q *Weight
		var err error
		if s.gptq {
			q, err = GPTQ(ctx, w, h, opts...)
		} else {
			q, err = RTN(ctx, w, nil, opts...)
		}
		if err != nil {
			return TensorError{}, fmt.Errorf("%s: %w", s.name, err)
		}
		se, err := evalOwn(ctx, s.name, w, acts, q, s.abit, clip, workers, ref)
		if err != nil {
			return TensorError{}, err
		}
		out.Schemes = append(out.Schemes, se)
	}
	for _, s := range []struct {
		name string
		kind ggmlKind
	}{{SchemeQ4_0, kindQ4_0}, {SchemeQ4K, kindQ4K}, {SchemeQ8_0, kindQ8_0}} {
		se, err := evalGGML(s.name, s.kind, w, acts, ref)
		if err != nil {
			return TensorError{}, err
		}
		out.Schemes = append(out.Schemes, se)
	}
	q, err := RTN(ctx, w, nil, WithBits(8), WithGroup(0), WithWorkers(workers))
	if err != nil {
		return TensorError{}, err
	}
	se, err := evalOwn(ctx, SchemeW8A8PC, w, acts, q, 8, clip, workers, ref)
	if err != nil {
		return TensorError{}, err
	}
	out.Schemes = append(out.Schemes, se)
	return out, nil
}

// evalOwn measures a Weight: weight error in its stored (rotated, padded) space — equal to the
// original-space error as the rotation is orthogonal, up to the padding's share — and the
// integer-kernel matmul error.
func evalOwn(ctx context.Context, name string, w, acts Matrix, q *Weight, abits int, clip float64, workers int, ref []float64) (SchemeError, error) {
	wq := w.Data
	if !q.Rotation.IsZero() {
		wq = make([]float32, q.N*q.KP)
		if err := q.Rotation.Apply(wq, w.Data, w.Rows); err != nil {
			return SchemeError{}, err
		}
	}
	y := make([]float32, acts.Rows*q.N)
	if err := q.MatMul(ctx, acts.Data, acts.Rows, abits, clip, y, workers); err != nil {
		return SchemeError{}, fmt.Errorf("%s: %s: %w", w.Name, name, err)
	}
	return SchemeError{Scheme: name, WeightRelErr: relErr32(q.Dequantize(), wq), MatmulRelErr: relErr64(y, ref)}, nil
}

type ggmlKind int

const (
	kindQ4_0 ggmlKind = iota
	kindQ4K
	kindQ8_0
)

func evalGGML(name string, kind ggmlKind, w, acts Matrix, ref []float64) (SchemeError, error) {
	qk, bb, enc, dec := QK4_0, BlockQ4_0, QuantizeQ4_0, DequantizeQ4_0
	switch kind {
	case kindQ4K:
		qk, bb, enc, dec = QKK, BlockQ4K, QuantizeQ4K, DequantizeQ4K
	case kindQ8_0:
		qk, bb, enc, dec = QK8_0, BlockQ8_0, QuantizeQ8_0, DequantizeQ8_0
	}
	k, kp := w.Cols, (w.Cols+qk-1)/qk*qk
	row := make([]float32, kp)
	blk := make([]byte, kp/qk*bb)
	wd := make([]float32, w.Rows*kp)
	for n := 0; n < w.Rows; n++ {
		clear(row)
		copy(row, w.Row(n))
		if err := enc(blk, row); err != nil {
			return SchemeError{}, fmt.Errorf("%s: %s row %d: %w", w.Name, name, n, err)
		}
		if err := dec(wd[n*kp:(n+1)*kp], blk); err != nil {
			return SchemeError{}, fmt.Errorf("%s: %s row %d: %w", w.Name, name, n, err)
		}
	}
	// activations as ggml's vec_dot quantizes them
	xa := make([]float32, acts.Rows*kp)
	for t := 0; t < acts.Rows; t++ {
		xr := xa[t*kp : (t+1)*kp]
		copy(xr, acts.Row(t))
		if kind == kindQ4K {
			fakeQuantQ8K(xr)
		} else {
			fakeQuantQ8_0(xr)
		}
	}
	y := matmulF64(xa, acts.Rows, wd, w.Rows, kp)
	wtrim := make([]float32, w.Rows*k)
	for n := 0; n < w.Rows; n++ {
		copy(wtrim[n*k:(n+1)*k], wd[n*kp:n*kp+k])
	}
	return SchemeError{Scheme: name, WeightRelErr: relErr32(wtrim, w.Data), MatmulRelErr: relErr64f(y, ref)}, nil
}

// fakeQuantQ8_0 replaces x (a multiple of 32 values) by its Q8_0 round trip.
func fakeQuantQ8_0(x []float32) {
	var blk [BlockQ8_0]byte
	for i := 0; i < len(x); i += QK8_0 {
		_ = QuantizeQ8_0(blk[:], x[i:i+QK8_0])
		_ = DequantizeQ8_0(x[i:i+QK8_0], blk[:])
	}
}

// fakeQuantQ8K replaces x (a multiple of 256 values) by its Q8_K round trip, as ggml's
// quantize_row_q8_K_ref does: d = max/-127 of the signed largest value, float32 scale.
func fakeQuantQ8K(x []float32) {
	for i := 0; i < len(x); i += QKK {
		b := x[i : i+QKK]
		var amax, mx float32
		for _, v := range b {
			if abs32(v) > amax {
				amax, mx = abs32(v), v
			}
		}
		if amax == 0 {
			continue
		}
		iscale := -127 / mx
		d := 1 / iscale
		for j, v := range b {
			b[j] = float32(min(127, nearestInt(float32(iscale*v)))) * d
		}
	}
}

// matmulF64 returns Y = X·Wᵀ (m x n) in float64 for X (m x k) and W (n x k), float32 inputs.
func matmulF64(x []float32, m int, w []float32, n, k int) []float64 {
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	w64 := make([]float64, len(w))
	for i, v := range w {
		w64[i] = float64(v)
	}
	y := make([]float64, m*n)
	blas64.Gemm(blas.NoTrans, blas.Trans, 1,
		blas64.General{Rows: m, Cols: k, Stride: k, Data: x64},
		blas64.General{Rows: n, Cols: k, Stride: k, Data: w64},
		0, blas64.General{Rows: m, Cols: n, Stride: n, Data: y})
	return y
}

func relErr32(got, want []float32) float64 {
	var num, den float64
	for i, v := range want {
		d := float64(got[i]) - float64(v)
		num += d * d
		den += float64(v) * float64(v)
	}
	return safeRatio(num, den)
}

func relErr64(got []float32, want []float64) float64 {
	var num, den float64
	for i, v := range want {
		d := float64(got[i]) - v
		num += d * d
		den += v * v
	}
	return safeRatio(num, den)
}

func relErr64f(got, want []float64) float64 {
	var num, den float64
	for i, v := range want {
		d := got[i] - v
		num += d * d
		den += v * v
	}
	return safeRatio(num, den)
}

func safeRatio(num, den float64) float64 {
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}

// MeanErrors averages each scheme's errors over tensors (arithmetic mean), in Schemes order.
func MeanErrors(ts []TensorError) []SchemeError {
	out := make([]SchemeError, 0, len(Schemes))
	for _, name := range Schemes {
		var sw, sm float64
		cnt := 0
		for _, t := range ts {
			for _, s := range t.Schemes {
				if s.Scheme == name {
					sw += s.WeightRelErr
					sm += s.MatmulRelErr
					cnt++
				}
			}
		}
		if cnt > 0 {
			out = append(out, SchemeError{Scheme: name, WeightRelErr: sw / float64(cnt), MatmulRelErr: sm / float64(cnt)})
		}
	}
	return out
}
