package dgemm

import (
	"testing"

	"orkpipe/internal/crosstest"
)

func TestMain(m *testing.M) { crosstest.MainWithoutAVX512(m) }

// suites are the tests that run the float64 products' AVX2 kernels (GPTQ, the Cholesky, the Hessians)
// against their references (each test named whole must run and pass; a suite without names runs its
// package's tests whole).
var suites = []crosstest.Suite{
	{Pkg: "ork/internal/dgemm", Tests: []string{"TestDgemmMatchesGonum", "TestGramUpperMatchesGonum", "TestNonzero",
		"TestPackedSkipsAsGonum", "TestDtrmmMatchesGonum", "TestDsyrkMatchesGonum", "TestDtrsmMatchesGonum"}},
}

// TestDgemmWithoutAVX512 runs suites on a CPU without AVX-512 (crosstest.RunWithoutAVX512).
func TestDgemmWithoutAVX512(t *testing.T) { crosstest.RunWithoutAVX512(t, suites) }
