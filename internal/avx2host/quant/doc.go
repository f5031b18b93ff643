// Package quant holds TestQuantWithoutAVX512: the AVX2 kernels of quantization, GGUF dequantization,
// calibration's encoding and BLAKE3, run on a CPU without AVX-512 (internal/avx2host).
package quant
