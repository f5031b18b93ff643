// Package avx2host holds, in its packages dgemm, forward and quant, the kernel packages' own tests
// run again on a CPU without AVX-512 — the host's own when it is one (AVX2 and FMA, no AVX-512: a Zen 2 or 3), else an
// emulated one (qemu-x86_64 -cpu Haswell: AVX2, FMA, F16C, no AVX-512) — where an AVX-512
// instruction left on an AVX2 path is an illegal instruction rather than, as on the AVX-512
// machines, a path that passes by turning a flag off.
//
// Build hosts without AVX-512 (Zen 2 and 3, Intel's client cores) run the AVX2 kernels; every
// kernel package's tests switch their paths by flags (has8x16, useVNNI, available512, ...), which
// checks each path's values but not the instructions it executes.
//
// Three packages (crosstest.RunWithoutAVX512 in each), so that each has go test's 10-minute timeout
// to itself: under emulation they take minutes (on an idle Intel Xeon, session 66: dgemm 92 s,
// forward 89 s, quant 80 s; as one package 345 s), and go test ./... runs them beside the rest.
package avx2host
