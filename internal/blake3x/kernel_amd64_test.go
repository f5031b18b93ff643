package blake3x

// setWideKernel selects the AVX-512 kernel (when the CPU has it) or guts for the code under test.
func setWideKernel(on bool) { wideKernel = on }
