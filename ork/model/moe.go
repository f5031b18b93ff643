package model

import (
	"fmt"
	"math"

	"orkpipe/ork/model/internal/fma"
)

// ExpertObserver is an Observer that also sees the per-expert sites of MoE blocks. In an MoE block
// Observe is called for the sites that are not per expert (InputQKV, InputAttnO and InputRouter: the
// ffn_norm output of every token, the router's input); ObserveExpert is called, for each expert that at
// least one token of the batch is routed to, with in = InputGateUp (the ffn_norm output of the tokens
// routed to the expert, in token order: the input of its gate and up slices) and in = InputDown
// (silu(gate)·up of those tokens: the input of its down slice). An Observer that is not an
// ExpertObserver does not see the experts.
type ExpertObserver interface {
	Observer
	ObserveExpert(layer int, in Input, expert int, x []float32)
}

// moeWeightsSumMin is the floor of the sum of the selected experts' probabilities before renormalizing
// (llama.cpp clamps it to the smallest normal binary16 to avoid a division by zero).
const moeWeightsSumMin = 6.103515625e-5

// Route computes llama.cpp's routing of one token for arch llama (llm_build_moe_ffn with softmax gating
// and norm_w = true): probabilities p = softmax(logits) (max subtracted, exponentials summed in float64,
// as ggml_soft_max), the len(sel) experts with the largest p in descending order (ties: the lower expert
// index first, so routing is deterministic), and their weights p[sel[j]] / max(Σ_j p[sel[j]], 2^-14).
// sel and w must have the same length, at most len(logits). For arch llama llama.cpp reads none of the
// expert_weights_scale / expert_weights_norm / expert_gating_func keys (softmax gating and norm_w are
// fixed, the scale stays 0 = none), and neither does this.
func Route(logits []float32, sel []int, w []float32) {
	route(GatingSoftmax, logits, nil, make([]float32, len(logits)), sel, w, false)
}

// route is llm_build_moe_ffn's routing of one token with norm_w = true and no weight scale: p =
// gating(logits) (softmax, or sigmoid of each logit), the experts of largest p + bias (bias nil: p) in
// descending order (ties: lower index first), weighted by p[sel[j]] / max(Σ_j p[sel[j]], 2^-14). buf
// holds len(logits) values, or twice that with a bias. ggml computes the softmax as ggml_soft_max
// (ggml_vec_soft_max_f32: fma.Expf for the groups of 8, each group's sum hsum8-ordered into a float64).
func route(g Gating, logits, bias, buf []float32, sel []int, w []float32, ggml bool) {
	p := buf[:len(logits)]
	if g == GatingSigmoid {
		for i, v := range logits {
			p[i] = sigmoid(v)
		}
	} else {
		mx := float32(math.Inf(-1))
		for _, v := range logits {
			mx = max(mx, v)
		}
		var sum float64
		simd := 0
		if ggml {
			simd = len(logits) &^ 7
			for i0 := 0; i0 < simd; i0 += 8 {
				var e [8]float32
				for l := range e {
					e[l] = fma.Expf(logits[i0+l] - mx)
				}
				copy(p[i0:], e[:])
				sum += float64(hsum8(&e))
			}
		}
		for i := simd; i < len(logits); i++ {
			p[i] = float32(math.Exp(float64(logits[i] - mx)))
			sum += float64(p[i])
		}
		scale := float32(1 / sum)
		for i := range p {
			p[i] *= scale
		}
	}
	score := p
	if bias != nil {
		score = buf[len(logits) : 2*len(logits)]
		for i, v := range p {
			score[i] = v + bias[i]
		}
	}
	for j := range sel { // k is small (2..8): selection by repeated scans
		best := -1
		for i, v := range score {
			if taken(sel[:j], i) {
				continue
			}
			if best < 0 || v > score[best] {
				best = i
			}
		}
		sel[j] = best
	}
	var ws float64
	for j, e := range sel {
		w[j] = p[e]
		ws += float64(w[j])
	}
	d := max(float32(ws), moeWeightsSumMin)
	for j := range w {
		w[j] /= d
	}
}

func taken(sel []int, i int) bool {
	for _, s := range sel {
		if s == i {
			return true
		}
	}
	return false
}

// runMoE computes the MoE FFN of block l for the T = len(x)/NEmbd rows of x (the ffn_norm output) into
// out: each token's output is Σ_j w_j · down_e(silu(gate_e x)·up_e x) over its selected experts e = sel_j,
// each term rounded to float32 and summed in slot order j = 0, 1, ... as ggml adds the expert views; with
// a shared expert, plus sigmoid(ffn_gate_inp_shexp·x) · down_s(silu(gate_s x)·up_s x). seqLen 0 applies
// every weight to all T rows at once; seqLen > 0 (T a multiple of it) applies the router and the shared
// expert, and shows the routing to obs, one sequence of seqLen rows at a time — what RunLayer does for
// each sequence alone — and only the routed experts to every row at once (runMoESeqs).
func (m *Model) runMoE(l *Layer, x, out []float32, s *scratch, obs Observer, seqLen int) error {
	c := &m.Cfg
	e, f, k, nx := c.NEmbd, c.ExpertFF(), c.NExpertUsed, c.NExpert
	if !c.MoE() || len(l.Experts) != nx {
		return fmt.Errorf("blk.%d: %d experts loaded, the model config says %d: %w", l.Index, len(l.Experts), nx, ErrBadModel)
	}
	t := len(x) / e
	if seqLen <= 0 {
		seqLen = t
	}
	logits := s.buf(sLogits, t*nx)
	for r0 := 0; r0 < t; r0 += seqLen {
		if err := l.Router.Apply(logits[r0*nx:(r0+seqLen)*nx], x[r0*e:(r0+seqLen)*e]); err != nil {
			return fmt.Errorf("blk.%d.ffn_gate_inp: %w", l.Index, err)
		}
	}
	sel, w := s.sel[:t*k], s.buf(sSelW, t*k)
	probs := s.f[sProbs]
	for tt := 0; tt < t; tt++ {
		route(c.Gating, logits[tt*nx:(tt+1)*nx], l.ExpProbsBias, probs, sel[tt*k:(tt+1)*k], w[tt*k:(tt+1)*k], m.GGMLExact)
	}
	if ro, ok := obs.(RouteObserver); ok {
		for r0 := 0; r0 < t; r0 += seqLen {
			ro.ObserveRoute(l.Index, k, sel[r0*k:(r0+seqLen)*k], w[r0*k:(r0+seqLen)*k])
		}
	}
	eo, _ := obs.(ExpertObserver)
	slots := s.buf(sSlots, t*k*e)
	for x0 := 0; x0 < nx; x0++ {
		routed := s.routed[:0] // indices tt*k+j of the (token, slot) pairs routed to expert x0
		for i, v := range sel {
			if v == x0 {
				routed = append(routed, i)
			}
		}
		s.routed = routed
		n := len(routed)
		if n == 0 {
			continue
		}
		xe := s.buf(sXE, n*e)
		for r, i := range routed {
			tt := i / k
			copy(xe[r*e:(r+1)*e], x[tt*e:(tt+1)*e])
		}
		ex := &l.Experts[x0]
		g, u := s.buf(sGate, n*f), s.buf(sUp, n*f)
		if eo != nil {
			eo.ObserveExpert(l.Index, InputGateUp, x0, xe)
		}
		if err := ex.Gate.Apply(g, xe); err != nil {
			return fmt.Errorf("blk.%d.ffn_gate_exps expert %d: %w", l.Index, x0, err)
		}
		if err := ex.Up.Apply(u, xe); err != nil {
			return fmt.Errorf("blk.%d.ffn_up_exps expert %d: %w", l.Index, x0, err)
		}
		if m.GGMLExact {
			for r := 0; r < len(g); r += f {
				swigluRow(g[r:r+f], g[r:r+f], u[r:r+f])
			}
		} else {
			for i, gv := range g {
				g[i] = gv / (1 + float32(math.Exp(float64(-gv)))) * u[i]
			}
		}
		if eo != nil {
			eo.ObserveExpert(l.Index, InputDown, x0, g)
		}
		ye := s.buf(sYE, n*e)
		if err := ex.Down.Apply(ye, g); err != nil {
			return fmt.Errorf("blk.%d.ffn_down_exps expert %d: %w", l.Index, x0, err)
		}
		for r, i := range routed {
			wi := w[i]
			dst, src := slots[i*e:(i+1)*e], ye[r*e:(r+1)*e]
			for j, v := range src {
				dst[j] = v * wi
			}
		}
	}
	for tt := 0; tt < t; tt++ {
		o := out[tt*e : (tt+1)*e]
		copy(o, slots[tt*k*e:(tt*k+1)*e])
		for j := 1; j < k; j++ {
			src := slots[(tt*k+j)*e : (tt*k+j+1)*e]
			for i, v := range src {
				o[i] += v
			}
		}
	}
	if l.Shared == nil {
		return nil
	}
	sh, fs := l.Shared, c.NFFShared
	ys := s.buf(sYE, t*e)
	for r0 := 0; r0 < t; r0 += seqLen {
		xr, yr := x[r0*e:(r0+seqLen)*e], ys[r0*e:(r0+seqLen)*e]
		if err := swiGLU(l.Index, sharedFFN, sh.Gate, sh.Up, sh.Down, yr, xr, s.buf(sGate, seqLen*fs), s.buf(sUp, seqLen*fs), obs, InputSharedDown, m.GGMLExact); err != nil {
			return err
		}
	}
	for tt := 0; tt < t; tt++ {
		gd := dot(sh.GateInp, x[tt*e:(tt+1)*e])
		if m.GGMLExact { // a mul_mat with one output row: ggml_vec_dot_f32
			gd = dotVecF32(sh.GateInp, x[tt*e:(tt+1)*e])
		}
		gs := sigmoid(gd)
		o, y := out[tt*e:(tt+1)*e], ys[tt*e:(tt+1)*e]
		for i, v := range y {
			o[i] += v * gs
		}
	}
	return nil
}
