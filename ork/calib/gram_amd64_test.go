package calib

import "testing"

// forGramPaths runs f once for each path of the pure-Go Hessian update this CPU can take: 8×16 tiles on
// AVX-512 (then 4×8 tiles, then Go), 4×8 tiles on AVX2 (then Go), Go alone.
func forGramPaths(t testing.TB, f func(path string)) {
	t.Helper()
	k, k512 := hasGramKernel, hasGram512
	defer func() { hasGramKernel, hasGram512 = k, k512 }()
	for _, p := range []struct {
		name    string
		k, k512 bool
	}{{"avx512", true, true}, {"avx2", true, false}, {"go", false, false}} {
		if (p.k && !k) || (p.k512 && !k512) {
			t.Logf("path %s: not on this CPU", p.name)
			continue
		}
		hasGramKernel, hasGram512 = p.k, p.k512
		f(p.name)
	}
}
