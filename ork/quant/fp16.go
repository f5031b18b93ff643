package quant

import "orkpipe/ork/gguf"

// FP32ToFP16 converts f to IEEE binary16 bits, rounding to nearest even (overflow to ±Inf,
// subnormals kept, NaN stays NaN) — what ggml's GGML_FP32_TO_FP16 does. It is gguf.F32ToF16, the one
// implementation, named here for the ggml block encoders of this package.
func FP32ToFP16(f float32) uint16 { return gguf.F32ToF16(f) }

// FP16ToFP32 converts IEEE binary16 bits to float32 (exact): gguf.F16ToF32.
func FP16ToFP32(h uint16) float32 { return gguf.F16ToF32(h) }
