package softmax

import "golang.org/x/sys/cpu"

// available says whether expShift may run: AVX-512 F. A variable so that tests can run both paths.
var available = cpu.X86.HasAVX512F

// expShift replaces each of the n values x at x by Expf(x - mx), sixteen at a time (the last ones
// masked); c holds the constants (consts).
//
//go:noescape
func expShift(x *float32, n int, mx float32, c *[12]float32)
