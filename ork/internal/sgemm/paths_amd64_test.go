package sgemm

import "testing"

// forKernels runs f once for each set of kernels this CPU can run: 4×4 on AVX-512 (then 2×4, 1×4),
// and 2×4 and 1×4 on AVX2 alone.
func forKernels(t testing.TB, f func(name string)) {
	t.Helper()
	z := available512
	defer func() { available512 = z }()
	for _, k := range []struct {
		name string
		z    bool
	}{{"avx512", true}, {"avx2", false}} {
		if k.z && !z {
			t.Logf("kernels %s: not on this CPU", k.name)
			continue
		}
		available512 = k.z
		f(k.name)
	}
}
