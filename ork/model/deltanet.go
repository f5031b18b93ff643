package model

import (
	"fmt"
	"math"

	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/model/internal/deltanet"
	"orkpipe/ork/model/internal/fma"
)

// deltaNet is qwen35's Gated DeltaNet mixer (llama.cpp qwen35.cpp build_layer_attn_linear and the fused
// ggml_gated_delta_net op). From x (the attn_norm output):
//
//	u = attn_qkv·x (q | k | v),  z = attn_gate·x,  beta = sigmoid(ssm_beta·x),
//	g = softplus(ssm_alpha·x + ssm_dt.bias) · ssm_a   (per value head, <= 0)
//
// Per sequence, u is convolved causally over time per channel (ssm_conv1d taps, zero history) and passed
// through silu; the q and k heads are L2-normalized (x / max(‖x‖, eps)). Value head j reads query/key
// head j mod KHeads and keeps a HeadDim×HeadDim state S, zero at the sequence start; per token
//
//	S ← exp(g)·S;  d = (v − Sᵀk)·beta;  S ← S + k dᵀ;  o = Sᵀq / sqrt(HeadDim)
//
// Each o is RMS-normed (ssm_norm), multiplied by silu(z) of its head, and ssm_out reads the heads
// concatenated; the result is written into x.
func (m *Model) deltaNet(l *Layer, x []float32, seqLen int, s *scratch, obs Observer) error {
	c := &m.Cfg
	sh, d := c.SSM, l.DeltaNet
	rows := len(x) / c.NEmbd
	cd, kd, vd, vh, hd := sh.ConvDim(), sh.KeyDim(), sh.ValueDim(), sh.VHeads, sh.HeadDim
	qkv, z := s.buf(sQKV, rows*cd), s.buf(sZ, rows*vd)
	g, beta := s.buf(sAlpha, rows*vh), s.buf(sBeta, rows*vh)
	for _, p := range []struct {
		lin Linear
		y   []float32
		n   string
	}{{d.QKV, qkv, "attn_qkv"}, {d.Gate, z, "attn_gate"}, {d.Beta, beta, "ssm_beta"}, {d.Alpha, g, "ssm_alpha"}} {
		if err := p.lin.Apply(p.y, x); err != nil {
			return fmt.Errorf("blk.%d.%s: %w", l.Index, p.n, err)
		}
	}
	for i, b := range beta {
		beta[i] = sigmoid(b)
	}
	sp := softplus
	if m.GGMLExact {
		sp = softplusF32
	}
	for i, a := range g {
		j := i % vh
		g[i] = sp(a+d.DtBias[j]) * d.A[j]
	}
	out := s.buf(sDN, rows*vd)
	for r0 := 0; r0 < rows; r0 += seqLen {
		u := qkv[r0*cd : (r0+seqLen)*cd]
		causalConv(u, d.Conv, cd, sh.ConvKernel, !m.GGMLExact, m.GGMLExact)
		parallelRows(seqLen, 8*seqLen*cd, 0, func(t0, t1 int) { // tokens alone: the same on any goroutine
			for t := t0; t < t1; t++ {
				if m.GGMLExact {
					siluRow(u[t*cd:(t+1)*cd], u[t*cd:(t+1)*cd])
				}
				l2Norm(u[t*cd:t*cd+kd], hd, c.NormEps)
				l2Norm(u[t*cd+kd:t*cd+2*kd], hd, c.NormEps)
			}
		})
		gatedDeltaRule(out[r0*vd:(r0+seqLen)*vd], u, g[r0*vh:(r0+seqLen)*vh], beta[r0*vh:(r0+seqLen)*vh], sh, s.f[sState], m.GGMLExact)
	}
	parallelRows(rows, 8*rows*vd, 0, func(r0, r1 int) { // rows alone: the same on any goroutine
		for r := r0; r < r1; r++ {
			for j := 0; j < vh; j++ {
				o, zz := out[r*vd+j*hd:r*vd+(j+1)*hd], z[r*vd+j*hd:r*vd+(j+1)*hd]
				m.norm(o, o, d.Norm, hd)
				if m.GGMLExact {
					siluRow(zz, zz)
					for i, v := range zz {
						o[i] *= v
					}
					continue
				}
				for i, v := range zz {
					o[i] *= v / (1 + float32(math.Exp(float64(-v))))
				}
			}
		}
	})
	if obs != nil {
		obs.Observe(l.Index, InputAttnO, out)
	}
	if err := d.Out.Apply(x, out); err != nil {
		return fmt.Errorf("blk.%d.ssm_out: %w", l.Index, err)
	}
	return nil
}

// gatedDeltaRule runs the recurrence of one sequence (T = len(g)/VHeads tokens): u holds per token the
// convolved, normalized q | k | v (ConvDim values), g and beta per token and value head; o receives per
// token the VHeads outputs of HeadDim values. Value heads run in parallel, each with HeadDim² + HeadDim
// values of work (state and delta) from work. The state is kept transposed (row j is column j of S), as
// ggml does, so every product is a contiguous dot product. ggml rounds as ggml's gated_delta_net kernel: the
// dot products are ggml_vec_dot_f32 (dotVecF32), the state update fused multiply-adds. Otherwise, on
// AVX2 or AVX-512 with HeadDim a multiple of 16, each token's step is ork/model/internal/deltanet's
// kernel, which holds the state array transposed: the same arithmetic, 8 or 16 rows at a time
// (TestGatedDeltaRuleKernel).
func gatedDeltaRule(o, u, g, beta []float32, sh SSMShape, work []float32, ggml bool) {
	cd, kd, vd, vh, hd := sh.ConvDim(), sh.KeyDim(), sh.ValueDim(), sh.VHeads, sh.HeadDim
	t := len(g) / vh
	scale := 1 / float32(math.Sqrt(float64(hd)))
	dt := dot
	if ggml {
		dt = dotVecF32
	}
	kernel := !ggml && deltanet.Available && hd%16 == 0
	parallel.ForWorker(vh, parallel.Workers(vh), func(w, j int) {
		st := work[w*(hd*hd+hd) : (w+1)*(hd*hd+hd)]
		state, delta := st[:hd*hd], st[hd*hd:]
		kh := j % sh.KHeads
		clear(state)
		for tt := 0; tt < t; tt++ {
			row := u[tt*cd:]
			q, k, v := row[kh*hd:(kh+1)*hd], row[kd+kh*hd:kd+(kh+1)*hd], row[2*kd+j*hd:2*kd+(j+1)*hd]
			decay := float32(math.Exp(float64(g[tt*vh+j])))
			if kernel {
				deltanet.Step(state, hd, k, q, v, decay, beta[tt*vh+j], scale, o[tt*vd+j*hd:tt*vd+(j+1)*hd])
				continue
			}
			fma.Scale(state, decay)
			b := beta[tt*vh+j]
			for jj := 0; jj < hd; jj++ {
				delta[jj] = (v[jj] - dt(state[jj*hd:(jj+1)*hd], k)) * b
			}
			for jj, dj := range delta {
				sr := state[jj*hd : (jj+1)*hd]
				if ggml {
					fma.AxpyRows(sr, k, hd, delta[jj:jj+1]) // sr[i] = fma32(k[i], dj, sr[i])
					continue
				}
				for i, kv := range k {
					sr[i] += kv * dj
				}
			}
			out := o[tt*vd+j*hd : tt*vd+(j+1)*hd]
			for jj := range out {
				out[jj] = dt(state[jj*hd:(jj+1)*hd], q) * scale
			}
		}
	})
}

// causalConv replaces each of the T rows of ch values of u by its causal depthwise convolution over
// time, as ggml_ssm_conv with a zero initial state: row t, channel c becomes
// Σ_{i<K} w[c·K+i]·u[t−K+1+i][c] (float32, summed in tap order; rows before 0 are zero), then silu when
// asked. ggml sums the taps as the reference build does (sumTail). It runs from the last row back, so
// it works in place; channels run on GOMAXPROCS goroutines, each alone.
func causalConv(u, w []float32, ch, k int, silu, ggml bool) {
	t := len(u) / ch
	parallelRows(ch, 8*t*ch, 0, func(c0, c1 int) { // channels alone: the same on any goroutine
		causalConvChannels(u, w, ch, k, t, c0, c1, silu, ggml)
	})
}

// causalConvChannels is causalConv for channels [c0, c1).
func causalConvChannels(u, w []float32, ch, k, t, c0, c1 int, silu, ggml bool) {
	taps := make([]float32, k)
	for r := t - 1; r >= 0; r-- {
		first := max(0, k-1-r) // taps reading rows before 0 contribute nothing
		for c := c0; c < c1; c++ {
			var sum float32
			if ggml {
				clear(taps)
				for i := first; i < k; i++ {
					taps[i] = u[(r-k+1+i)*ch+c]
				}
				u[r*ch+c] = sumTail(taps, w[c*k:(c+1)*k], 0)
				continue
			}
			for i := first; i < k; i++ {
				sum += u[(r-k+1+i)*ch+c] * w[c*k+i]
			}
			if silu {
				sum = sum / (1 + float32(math.Exp(float64(-sum))))
			}
			u[r*ch+c] = sum
		}
	}
}

// l2Norm scales every group of n values of x to unit L2 norm as ggml_l2_norm: x / max(sqrt(Σx²), eps),
// the squares rounded to float32 and summed in float64.
func l2Norm(x []float32, n int, eps float32) {
	for r := 0; r+n <= len(x); r += n {
		row := x[r : r+n]
		var sum float64
		for _, v := range row {
			sum += float64(v * v)
		}
		scale := 1 / max(float32(math.Sqrt(float64(float32(sum)))), eps)
		for i := range row {
			row[i] *= scale
		}
	}
}

// softplusF32 is ggml's softplus as it computes it: x above 20, else logf(1 + expf(x)) in float32.
func softplusF32(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log(float64(1 + expf64(x))))
}

// softplus is ggml's: x above 20, else log(1 + exp(x)).
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log(1 + math.Exp(float64(x))))
}
