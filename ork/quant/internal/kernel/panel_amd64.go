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

// PanelDots16x4AVX2 is PanelDots16x4 for CPUs with AVX2 (no VNNI): the same out for t < 4, r < 16,
//
//	out[t·16+r] = (Σ_{gi in order} float32(dot_gi(t, r)) · scales[gi·16+r]) · ascale[t]
//
// summed in float32 without fused multiply-adds from 0, dot_gi(t, r) the exact int32 dot product of
// token t's codes and row r's codes over group gi (ng groups of g8·8 values). The token codes come
// widened to int16 (Widen16): token t's kp values at a + t·kp. The panel w holds, for each pair
// of columns 2q, 2q+1 in order, 32 bytes: row r's two codes at bytes 2r and 2r+1 (int8). Exact
// while a group's |Σ w·a| stays below 2^31 (groups below 131072 values). ng and g8 positive.
//
//go:noescape
func PanelDots16x4AVX2(w *int8, a *int16, kp, ng, g8 int, scales, ascale, out *float32)

// Widen16 sets dst[i] = int16(src[i]) for i < 16·n16 (AVX2; n16 positive).
//
//go:noescape
func Widen16(dst *int16, src *int8, n16 int)
