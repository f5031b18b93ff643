package kernel

import "golang.org/x/sys/cpu"

// AvailableVNNI says whether PanelDots16x4 may run: AVX-512 F and VL with the VNNI extension
// (VPDPBUSD), the OS saving the ZMM registers.
var AvailableVNNI = Available512 && cpu.X86.HasAVX512VNNI

// PanelDots16x4 is the integer matmul of four activation rows with a panel of sixteen weight rows,
// over ng groups of g8·8 values (AVX-512 VNNI):
//
//	out[t·16+r] = (Σ_{gi in order} float32(dot_gi(t, r)) · scales[gi·16+r]) · ascale[t]
//
// for t < 4, r < 16, the sums in float32 without fused multiply-adds, starting from 0 — what
// ork/quant's group loop computes per (token, row). dot_gi(t, r) is the exact int32 dot product of
// token t's codes (a + t·kp, int8) and row r's codes over group gi. The panel w holds, for each
// run of four values k..k+3 in order (groups one after another), 64 bytes: row r's four codes at
// bytes 4r..4r+3, each as code+128 (the code XOR 0x80, an unsigned byte). corr holds, for token t
// at corr + t·ng, 128·Σ of the token's codes over each group, which the kernel subtracts: the
// product sums are Σ (w+128)·a. Exact while a group's |Σ (w+128)·a| stays below 2^31 (groups
// below 65793 values). ng and g8 positive.
//
//go:noescape
func PanelDots16x4(w *uint8, a *int8, kp, ng, g8 int, corr *int32, scales, ascale, out *float32)
