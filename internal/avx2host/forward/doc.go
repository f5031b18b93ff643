// Package forward holds TestForwardWithoutAVX512: the forward pass's AVX2 kernels (float32 products,
// softmax, multiply-adds, DeltaNet), run on a CPU without AVX-512 (internal/avx2host).
package forward
