// Package avx2host holds one test: the kernel packages' own tests run again on a CPU without
// AVX-512, an emulated one (qemu-x86_64 -cpu Haswell: AVX2, FMA, F16C, no AVX-512), where an
// AVX-512 instruction left on an AVX2 path is an illegal instruction rather than, as on the
// AVX-512 machines the tests otherwise run on, a path that passes by turning a flag off.
//
// Build hosts without AVX-512 (Zen 2 and 3, Intel's client cores) run the AVX2 kernels; every
// kernel package's tests switch their paths by flags (has8x16, useVNNI, available512, ...), which
// checks each path's values but not the instructions it executes.
package avx2host
