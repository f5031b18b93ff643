package quant

import (
	"testing"

	"orkpipe/internal/crosstest"
)

func TestMain(m *testing.M) { crosstest.MainWithoutAVX512(m) }

// suites are the tests that run the AVX2 kernels of quantization, GGUF dequantization, calibration's
// encoding and BLAKE3 against their references (each test named whole must run and pass; a suite
// without names runs its package's tests whole).
var suites = []crosstest.Suite{
	{Pkg: "ork/quant", Tests: []string{"TestMatMulIntGroupsBitIdentical", "TestQuantizeActivationsKernels",
		"TestClipErrsKernelMatchesGo", "TestGroupSearch32MatchesGo", "TestRTN32Paths", "TestRowKernels32",
		"TestRowKernelsDone", "TestRowSearch32Lanes", "TestAbsMax32"}},
	{Pkg: "ork/gguf", Tests: []string{"TestDequantQ8_0Kernel"}},
	{Pkg: "ork/calib", Tests: []string{"TestEncodeValuesKernel"}},
	{Pkg: "internal/blake3x", Tests: []string{"TestHash8AVX2", "TestSum256", "TestChunks16", "TestParents16"}},
}

// TestQuantWithoutAVX512 runs suites on a CPU without AVX-512 (crosstest.RunWithoutAVX512).
func TestQuantWithoutAVX512(t *testing.T) { crosstest.RunWithoutAVX512(t, suites) }
