package model

import (
	"context"
	"fmt"
	"math"
)

// Input is the position of a linear input site of a block in [Config.Sites] of its layer (see
// InputQKV for the positions every layer kind shares).
type Input int

// String returns the name of the input in a llama block (attention and a dense FFN).
//
// Deprecated: names depend on the layer kind; use Config.Sites(layer)[in].Name.
func (in Input) String() string {
	switch in {
	case InputQKV:
		return "attn_qkv"
	case InputAttnO:
		return "attn_output"
	case InputGateUp:
		return "ffn_gate_up"
	case InputDown:
		return "ffn_down"
	}
	return fmt.Sprintf("Input(%d)", int(in))
}

// Weights lists the weight names (within a block) that read an input of a llama block with a dense FFN.
//
// Deprecated: use Config.Sites(layer)[in].Weights.
func (in Input) Weights() []string {
	switch in {
	case InputQKV:
		return []string{"attn_q", "attn_k", "attn_v"}
	case InputAttnO:
		return []string{"attn_output"}
	case InputGateUp:
		return []string{"ffn_gate", "ffn_up"}
	case InputDown:
		return []string{"ffn_down"}
	}
	return nil
}

// Width returns the number of values per token of an input of a llama block.
//
// Deprecated: use Config.Sites(layer)[in].Width.
func (in Input) Width(c *Config) int {
	switch in {
	case InputAttnO:
		return c.QDim()
	case InputDown:
		return c.NFF
	}
	return c.NEmbd
}

// Observer sees every linear input site of a block as it is computed: Observe(layer, in, x) with in a
// position in Config.Sites(layer) of a site that is not per expert, and x its rows: one per token of
// the batch (all sequences, in order), Sites(layer)[in].Width values each. Per-expert sites are seen
// only by an [ExpertObserver]. Observe is called once per site and batch; it must not retain x.
type Observer interface {
	Observe(layer int, in Input, x []float32)
}

// Model runs a llama-family network. It is safe for one goroutine at a time.
type Model struct {
	Cfg Config
	Src WeightSource

	buf scratch // reused between RunLayer calls of the same length
}

// scratch holds RunLayer's temporaries, so that running many batches of one shape allocates nothing
// per layer. Buffers indexed by token hold rows = nSeq·seqLen rows; attention scores are per sequence.
type scratch struct {
	rows, seqLen        int
	x, q, k, v, att     []float32
	gate, up, attScores []float32
	// MoE blocks only: router logits [t][n_expert], probabilities of one token, the selected experts and
	// their weights [t][k], the gathered rows of one expert and its output [t][n_embd], the weighted
	// expert outputs per (token, slot) [t][k][n_embd], the block's FFN output, the (token, slot) pairs
	// routed to one expert.
	logits, probs, selW   []float32
	sel, routed           []int
	xe, ye, slots, moeOut []float32
}

func (s *scratch) get(c *Config, rows, seqLen int) *scratch {
	if s.rows != rows || s.seqLen != seqLen {
		t := rows
		*s = scratch{rows: rows, seqLen: seqLen,
			x: make([]float32, t*c.NEmbd), q: make([]float32, t*c.QDim()), k: make([]float32, t*c.KVDim()),
			v: make([]float32, t*c.KVDim()), att: make([]float32, t*c.QDim()),
			gate: make([]float32, t*c.NFF), up: make([]float32, t*c.NFF),
			attScores: make([]float32, attentionWorkers(c.NHead)*seqLen*seqLen),
		}
		if c.MoE() {
			k := c.NExpertUsed
			s.logits, s.probs, s.selW = make([]float32, t*c.NExpert), make([]float32, c.NExpert), make([]float32, t*k)
			s.sel, s.routed = make([]int, t*k), make([]int, 0, t*k)
			s.xe, s.ye, s.slots, s.moeOut = make([]float32, t*c.NEmbd), make([]float32, t*c.NEmbd), make([]float32, t*k*c.NEmbd), make([]float32, t*c.NEmbd)
		}
	}
	return s
}

// ScratchBytes is the memory RunLayer keeps for one sequence of t tokens: BatchScratchBytes(1, t).
func (c *Config) ScratchBytes(t int) int64 { return c.BatchScratchBytes(1, t) }

// BatchScratchBytes is the memory RunLayerBatch keeps for nSeq sequences of seqLen tokens: per token of
// the batch the normed input, Q, K, V, the attention output, gate and up (4·(E + 2Q + 2KV + 2F) bytes),
// and per sequence one seqLen×seqLen score matrix for each head running at once (attention runs one
// sequence at a time; the count depends on GOMAXPROCS). MoE blocks add, per token of the batch, the
// router logits, the routing (selected experts and weights, 8+4+8 bytes per token and slot), the
// gathered rows of one expert and its output, the weighted outputs per (token, slot) and the FFN output.
func (c *Config) BatchScratchBytes(nSeq, seqLen int) int64 {
	t := int64(nSeq) * int64(seqLen)
	b := 4*t*int64(c.NEmbd+2*c.QDim()+2*c.KVDim()+2*c.NFF) + 4*int64(attentionWorkers(c.NHead))*int64(seqLen)*int64(seqLen)
	if c.MoE() {
		k, e := int64(c.NExpertUsed), int64(c.NEmbd)
		b += 4*t*int64(c.NExpert) + 4*int64(c.NExpert) + 20*t*k + 4*t*(3*e+k*e)
	}
	return b
}

// NewModel validates cfg and returns a model reading its weights from src.
func NewModel(cfg Config, src WeightSource) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Model{Cfg: cfg, Src: src}, nil
}

// Embed returns the token embeddings of tokens (len(tokens) rows of NEmbd values).
func (m *Model) Embed(ctx context.Context, tokens []int32) ([]float32, error) {
	for i, t := range tokens {
		if t < 0 || int(t) >= m.Cfg.NVocab {
			return nil, fmt.Errorf("token %d at position %d: outside the vocabulary of %d: %w", t, i, m.Cfg.NVocab, ErrBadModel)
		}
	}
	h := make([]float32, len(tokens)*m.Cfg.NEmbd)
	if err := m.Src.Rows(ctx, "token_embd.weight", tokens, h); err != nil {
		return nil, err
	}
	return h, nil
}

// Forward runs tokens (one sequence starting at position 0) through every layer and returns the logits,
// len(tokens) rows of NVocab values.
func (m *Model) Forward(ctx context.Context, tokens []int32) ([]float32, error) {
	h, err := m.Embed(ctx, tokens)
	if err != nil {
		return nil, err
	}
	for i := 0; i < m.Cfg.NLayer; i++ {
		l, err := LoadLayer(ctx, &m.Cfg, m.Src, i)
		if err != nil {
			return nil, err
		}
		if err := m.RunLayer(ctx, l, h, nil); err != nil {
			return nil, err
		}
	}
	return m.Logits(ctx, h)
}

// Logits applies the final norm and the output projection (token_embd when output.weight is absent,
// i.e. tied embeddings) to hidden states h.
func (m *Model) Logits(ctx context.Context, h []float32) ([]float32, error) {
	e := m.Cfg.NEmbd
	norm, ok, err := m.Src.Vector(ctx, "output_norm.weight")
	if err != nil {
		return nil, err
	}
	if !ok || len(norm) != e {
		return nil, fmt.Errorf("tensor output_norm.weight: missing or not %d values: %w", e, ErrBadModel)
	}
	out, ok, err := m.Src.Linear(ctx, "output.weight")
	if err != nil {
		return nil, err
	}
	name := "output.weight"
	if !ok {
		name = "token_embd.weight"
		if out, ok, err = m.Src.Linear(ctx, name); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("tensors output.weight and token_embd.weight: both missing: %w", ErrBadModel)
		}
	}
	if n, k := out.Dims(); n != m.Cfg.NVocab || k != e {
		return nil, fmt.Errorf("tensor %s: %d rows of %d, want %d of %d: %w", name, n, k, m.Cfg.NVocab, e, ErrBadModel)
	}
	t := len(h) / e
	x := make([]float32, len(h))
	rmsNorm(x, h, norm, e, m.Cfg.NormEps)
	logits := make([]float32, t*m.Cfg.NVocab)
	if err := out.Apply(logits, x); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return logits, nil
}

// RunLayer applies block l to the hidden states h (one sequence: T rows of NEmbd values, positions
// 0..T-1) in place: RunLayerBatch with one sequence.
func (m *Model) RunLayer(ctx context.Context, l *Layer, h []float32, obs Observer) error {
	e := m.Cfg.NEmbd
	if len(h) == 0 || len(h)%e != 0 {
		return fmt.Errorf("layer %d: hidden states of %d values are not rows of %d: %w", l.Index, len(h), e, ErrBadModel)
	}
	return m.RunLayerBatch(ctx, l, h, len(h)/e, obs)
}

// RunLayerBatch applies block l in place to the hidden states h of S sequences of seqLen tokens each
// (S·seqLen rows of NEmbd values, sequence after sequence). Every matmul weight is applied once to all
// S·seqLen rows; attention runs per sequence, each sequence at positions 0..seqLen-1 and seeing only
// itself. The result for a sequence is that of RunLayer on it alone, up to the float32 rounding of the
// matrix products (gonum's Sgemm blocks differently for different row counts). obs, when not nil, sees
// each site once per call with all S·seqLen rows (an ExpertObserver also the routed rows per expert).
func (m *Model) RunLayerBatch(ctx context.Context, l *Layer, h []float32, seqLen int, obs Observer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &m.Cfg
	e := c.NEmbd
	if seqLen <= 0 || len(h) == 0 || len(h)%(seqLen*e) != 0 {
		return fmt.Errorf("layer %d: hidden states of %d values are not sequences of %d rows of %d: %w", l.Index, len(h), seqLen, e, ErrBadModel)
	}
	rows := len(h) / e
	s := m.buf.get(c, rows, seqLen)
	x := s.x
	rmsNorm(x, h, l.AttnNorm, e, c.NormEps)
	if obs != nil {
		obs.Observe(l.Index, InputQKV, x)
	}
	q, k, v := s.q, s.k, s.v
	for _, p := range []struct {
		lin Linear
		y   []float32
		n   string
	}{{l.Q, q, "attn_q"}, {l.K, k, "attn_k"}, {l.V, v, "attn_v"}} {
		if err := p.lin.Apply(p.y, x); err != nil {
			return fmt.Errorf("blk.%d.%s: %w", l.Index, p.n, err)
		}
	}
	if l.QNorm != nil {
		rmsNorm(q, q, l.QNorm, c.HeadDim, c.NormEps)
	}
	if l.KNorm != nil {
		rmsNorm(k, k, l.KNorm, c.HeadDim, c.NormEps)
	}
	rope := newRoPE(c, seqLen)
	att := s.att
	qd, kvd := c.QDim(), c.KVDim()
	for r0 := 0; r0 < rows; r0 += seqLen {
		qs, ks := q[r0*qd:(r0+seqLen)*qd], k[r0*kvd:(r0+seqLen)*kvd]
		rope.apply(qs, c.NHead, c.HeadDim)
		rope.apply(ks, c.NHeadKV, c.HeadDim)
		attention(att[r0*qd:(r0+seqLen)*qd], s.attScores, qs, ks, v[r0*kvd:(r0+seqLen)*kvd], seqLen, c.NHead, c.NHeadKV, c.HeadDim)
	}
	if obs != nil {
		obs.Observe(l.Index, InputAttnO, att)
	}
	if err := l.O.Apply(x, att); err != nil {
		return fmt.Errorf("blk.%d.attn_output: %w", l.Index, err)
	}
	for i := range h {
		h[i] += x[i]
	}
	rmsNorm(x, h, l.FFNorm, e, c.NormEps)
	if l.Router != nil {
		if obs != nil {
			obs.Observe(l.Index, InputRouter, x)
		}
		if err := m.runMoE(l, x, s.moeOut, s, obs); err != nil {
			return err
		}
		for i := range h {
			h[i] += s.moeOut[i]
		}
		return nil
	}
	if obs != nil {
		obs.Observe(l.Index, InputGateUp, x)
	}
	g, u := s.gate, s.up
	if err := l.Gate.Apply(g, x); err != nil {
		return fmt.Errorf("blk.%d.ffn_gate: %w", l.Index, err)
	}
	if err := l.Up.Apply(u, x); err != nil {
		return fmt.Errorf("blk.%d.ffn_up: %w", l.Index, err)
	}
	for i, gv := range g {
		g[i] = gv / (1 + float32(math.Exp(float64(-gv)))) * u[i]
	}
	if obs != nil {
		obs.Observe(l.Index, InputDown, g)
	}
	if err := l.Down.Apply(x, g); err != nil {
		return fmt.Errorf("blk.%d.ffn_down: %w", l.Index, err)
	}
	for i := range h {
		h[i] += x[i]
	}
	return nil
}

// rmsNorm normalises every row of n values of src into dst (which may be src) and scales by w, as
// ggml_rms_norm: sum of squares in float64, scale = 1/sqrt(mean + eps).
func rmsNorm(dst, src, w []float32, n int, eps float32) {
	for r := 0; r+n <= len(src); r += n {
		row := src[r : r+n]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		mean := float32(ss / float64(n))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		out := dst[r : r+n]
		for i, v := range row {
			out[i] = v * scale * w[i]
		}
	}
}

// ropeTable holds cos/sin per position and rotated pair.
type ropeTable struct {
	neox     bool
	dim      int
	cos, sin []float32 // [pos][dim/2]
}

func newRoPE(c *Config, t int) *ropeTable {
	half := c.RopeDim / 2
	r := &ropeTable{neox: c.RopeNeox, dim: c.RopeDim, cos: make([]float32, t*half), sin: make([]float32, t*half)}
	thetaScale := float32(math.Pow(float64(c.RopeBase), -2.0/float64(c.RopeDim)))
	for p := 0; p < t; p++ {
		theta := float32(p) // ggml_rope_cache_init: theta starts at the position and is scaled per pair
		for i := 0; i < half; i++ {
			th := theta
			if c.RopeFreqFactors != nil {
				th /= c.RopeFreqFactors[i]
			}
			a := float64(c.RopeFreqScale * th)
			r.cos[p*half+i] = float32(math.Cos(a))
			r.sin[p*half+i] = float32(math.Sin(a))
			theta *= thetaScale
		}
	}
	return r
}

// apply rotates the first dim values of each of heads heads of hd values in every row of x.
func (r *ropeTable) apply(x []float32, heads, hd int) {
	half := r.dim / 2
	w := heads * hd
	for p := 0; p*w < len(x); p++ {
		cs, sn := r.cos[p*half:(p+1)*half], r.sin[p*half:(p+1)*half]
		for h := 0; h < heads; h++ {
			v := x[p*w+h*hd : p*w+(h+1)*hd]
			for i := 0; i < half; i++ {
				a, b := 2*i, 2*i+1
				if r.neox {
					a, b = i, i+half
				}
				x0, x1 := v[a], v[b]
				v[a] = x0*cs[i] - x1*sn[i]
				v[b] = x0*sn[i] + x1*cs[i]
			}
		}
	}
}
