package deltanet

import "golang.org/x/sys/cpu"

// Available says whether Step may run: AVX-512F (x/sys/cpu also checks that the OS saves the
// registers). A variable so that tests can compare the callers' own code.
var Available = cpu.X86.HasAVX512F

// step16 runs the step for rows [j, j+16) of the state: st points at S[j][0] (column 0, lane 0), v
// and out at their values j.
//
//go:noescape
func step16(st *float32, hd int, k, q, v *float32, decay, beta, scale float32, out *float32)
