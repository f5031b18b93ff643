package quant

import (
	"os"

	"golang.org/x/sys/cpu"
)

// OpenBLASCoreEnv is the variable OpenBLAS reads, once, when the library is loaded, to force its
// kernel set instead of detecting the CPU.
const OpenBLASCoreEnv = "OPENBLAS_CORETYPE"

// OpenBLASCoreAdvice says which kernel set OpenBLAS should be forced to, when its CPU detection
// fell back to generic kernels on a CPU that has better ones. Debian's OpenBLAS (0.3.21, built
// DYNAMIC_ARCH) does not know newer Intel models (Emerald Rapids, family 6 model 207, say) and
// falls back to "Prescott" (SSE3), whose dgemm is several times slower than the "SkylakeX"
// (AVX-512) kernels on the same cores (docs/performance.md).
//
// It returns ok only when the chosen core is that fallback, OPENBLAS_CORETYPE is not already set
// (a user's choice is never overridden) and the CPU has AVX-512 F/BW/DQ/VL ("SkylakeX") or AVX2
// and FMA ("Haswell"). The variable only takes effect in a new process: see internal/blascore's
// re-exec. In the pure-Go build it never advises anything.
func OpenBLASCoreAdvice() (core string, ok bool) {
	if _, set := os.LookupEnv(OpenBLASCoreEnv); set {
		return "", false
	}
	return adviseCore(OpenBLASCore(), cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL,
		cpu.X86.HasAVX2 && cpu.X86.HasFMA)
}

// adviseCore is OpenBLASCoreAdvice's rule, given the chosen core and the CPU's features.
func adviseCore(chosen string, avx512, avx2fma bool) (string, bool) {
	if chosen != "Prescott" {
		return "", false
	}
	switch {
	case avx512:
		return "SkylakeX", true
	case avx2fma:
		return "Haswell", true
	}
	return "", false
}
