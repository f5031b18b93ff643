package model

import (
	"fmt"

	"orkpipe/ork/gguf"
	"orkpipe/ork/quant"
)

// ggmlActLinear is a Linear (a Dense or an Encoded) made from a quantized or half-precision GGUF tensor whose input is first
// rounded the way ggml's CPU backend converts activations for that weight type (its vec_dot_type):
// Q8_0 blocks of 32 for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 (Q8_1, used for Q4_1/Q5_1, has the same codes and
// scale), binary16 for F16 and bfloat16 for BF16. llama-perplexity's figures for quantized files include
// this rounding; the dot products themselves are then computed in float32.
type ggmlActLinear struct {
	Linear
	typ gguf.Type
}

// ggmlActivationRounding reports whether tensors of type t get rounded activations.
func ggmlActivationRounding(t gguf.Type) bool {
	switch t {
	case gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ8_0, gguf.TypeF16, gguf.TypeBF16:
		return true
	}
	return false
}

// Apply implements Linear.
func (l *ggmlActLinear) Apply(y, x []float32) error {
	n, k := l.Dims()
	if err := checkApply(y, x, n, k); err != nil {
		return err
	}
	xr := make([]float32, len(x))
	switch l.typ {
	case gguf.TypeF16:
		for i, v := range x {
			xr[i] = gguf.F16ToF32(gguf.F32ToF16(v))
		}
	case gguf.TypeBF16:
		for i, v := range x {
			xr[i] = gguf.BF16ToF32(gguf.F32ToBF16(v))
		}
	default:
		if k%quant.QK8_0 != 0 {
			return fmt.Errorf("%s row of %d values is not whole Q8_0 blocks: %w", l.typ, k, ErrBadModel)
		}
		blk := make([]byte, len(x)/quant.QK8_0*34)
		if err := quant.QuantizeQ8_0(blk, x); err != nil {
			return err
		}
		if err := quant.DequantizeQ8_0(xr, blk); err != nil {
			return err
		}
	}
	return l.Linear.Apply(y, xr)
}
