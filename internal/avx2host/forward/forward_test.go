package forward

import (
	"testing"

	"orkpipe/internal/crosstest"
)

func TestMain(m *testing.M) { crosstest.MainWithoutAVX512(m) }

// suites are the tests that run the forward pass's AVX2 kernels (float32 products, softmax, multiply-
// adds, DeltaNet) against their references (each test named whole must run and pass; a suite without
// names runs its package's tests whole).
var suites = []crosstest.Suite{
	{Pkg: "ork/internal/sgemm", Tests: []string{"TestNTMatchesGonum", "TestNNMatchesGonum", "TestDotMatchesKernels",
		"TestNaNPayloads", "TestNTShortRows", "TestPack4", "TestNTRowsMatchesNT",
		"TestNTRowsDecodeError"}},
	{Pkg: "ork/model/internal/softmax"},
	{Pkg: "ork/model/internal/fma"},
	{Pkg: "ork/model/internal/deltanet"},
}

// TestForwardWithoutAVX512 runs suites on a CPU without AVX-512 (crosstest.RunWithoutAVX512).
func TestForwardWithoutAVX512(t *testing.T) { crosstest.RunWithoutAVX512(t, suites) }
