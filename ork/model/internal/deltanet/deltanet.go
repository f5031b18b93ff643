// Package deltanet is one token's step of the gated delta rule (Gated DeltaNet's recurrence) for one
// value head, on AVX2 or AVX-512, with the state held by columns: st[i·hd + j] is S[j][i], where S is the
// head's hd × hd state as ork/model's Go loops hold it (row j one contiguous run there, so here the
// transpose of their array). The step, for a key k, query q, value v, decay and beta:
//
//	S ← S·decay;  d_j = (v_j − S_j·k)·beta;  S_j ← S_j + k·d_j;  out_j = (S_j·q)·scale
//
// with each product and sum rounded as ork/model's float32 code rounds them (no fused multiply-add;
// each dot product S_j·x in four partial sums over i mod 4, added as (s0 + s1) + (s2 + s3)): the
// kernel holds 16 rows j in the 16 lanes of a register (8 in AVX2's), so every lane runs that row's
// arithmetic in the same order, and gives the same bits as StepGo.
package deltanet

import "fmt"

// Step runs one token's step on the state st (hd·hd values, by columns), writing out (hd values).
// hd must be a positive multiple of 16 and Available true: the caller runs its own code otherwise.
func Step(st []float32, hd int, k, q, v []float32, decay, beta, scale float32, out []float32) {
	if !Available || hd <= 0 || hd%16 != 0 || len(st) < hd*hd || len(k) < hd || len(q) < hd || len(v) < hd || len(out) < hd {
		panic(fmt.Sprintf("deltanet.Step: head dim %d, state %d, k %d, q %d, v %d, out %d values (available %v)", hd, len(st), len(k), len(q), len(v), len(out), Available))
	}
	if wide {
		for j := 0; j < hd; j += 16 {
			step16(&st[j], hd, &k[0], &q[0], &v[j], decay, beta, scale, &out[j])
		}
		return
	}
	for j := 0; j < hd; j += 8 {
		step8(&st[j], hd, &k[0], &q[0], &v[j], decay, beta, scale, &out[j])
	}
}

// StepGo is Step in Go, the reference its kernel matches bit for bit (any hd).
func StepGo(st []float32, hd int, k, q, v []float32, decay, beta, scale float32, out []float32) {
	for i := range st[:hd*hd] {
		st[i] *= decay
	}
	for j := 0; j < hd; j++ {
		var s [4]float32
		for i := 0; i < hd; i++ {
			s[i%4] += st[i*hd+j] * k[i]
		}
		d := (v[j] - ((s[0] + s[1]) + (s[2] + s[3]))) * beta
		s = [4]float32{}
		for i := 0; i < hd; i++ {
			x := st[i*hd+j] + float32(k[i]*d)
			st[i*hd+j] = x
			s[i%4] += x * q[i]
		}
		out[j] = ((s[0] + s[1]) + (s[2] + s[3])) * scale
	}
}
