package deltanet

import "golang.org/x/sys/cpu"

// Available says whether Step may run: AVX2 (x/sys/cpu also checks that the OS saves the
// registers). A variable so that tests can compare the callers' own code.
var Available = cpu.X86.HasAVX2

// wide says whether Step runs step16 (AVX-512F) rather than step8; a variable so that tests run
// both on a CPU that has both.
var wide = cpu.X86.HasAVX512F

// step16 runs the step for rows [j, j+16) of the state: st points at S[j][0] (column 0, lane 0), v
// and out at their values j. AVX-512F.
//
//go:noescape
func step16(st *float32, hd int, k, q, v *float32, decay, beta, scale float32, out *float32)

// step8 is step16 for rows [j, j+8), in AVX2 registers.
//
//go:noescape
func step8(st *float32, hd int, k, q, v *float32, decay, beta, scale float32, out *float32)
