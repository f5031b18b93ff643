package sgemm

import "testing"

// forKernels runs f once for each set of kernels this CPU can run: on AVX-512 3×16 over packed rows of
// B and 4×4 over rows as they are (then 2×4, 1×4), and on AVX2 alone 3×4 over packed rows and 2×4 and
// 1×4 over rows as they are.
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
