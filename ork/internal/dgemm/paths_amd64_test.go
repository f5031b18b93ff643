package dgemm

import "testing"

// forPaths runs f once for each path this CPU can take: 8×16 tiles on AVX-512 (then 4×8, then Go),
// 4×8 tiles on AVX2 (then Go). (Without AVX2 every product is gonum's own.)
func forPaths(t testing.TB, f func(path string)) {
	t.Helper()
	k4, k16 := has4x8, has8x16
	defer func() { has4x8, has8x16 = k4, k16 }()
	for _, p := range []struct {
		name    string
		k4, k16 bool
	}{{"avx512", true, true}, {"avx2", true, false}} {
		if (p.k4 && !k4) || (p.k16 && !k16) {
			t.Logf("path %s: not on this CPU", p.name)
			continue
		}
		has4x8, has8x16 = p.k4, p.k16
		f(p.name)
	}
}
