package model

import "orkpipe/ork/internal/parallel"

// The float32 scratch buffers of a forward pass, by purpose. A Model keeps each at the largest size any
// of its blocks needed, so running many batches of one shape allocates nothing per layer.
const (
	sX       = iota // the normed input of a half block, then its output [rows·E]
	sQ              // attention queries [rows·Q]
	sK              // attention keys [rows·KV]
	sV              // attention values [rows·KV]
	sAtt            // attention output [rows·Q]
	sScores         // attention scores: attentionScratch(NHead, seqLen)
	sQG             // gated attention: attn_q's output, per head q then gate [rows·2Q]
	sAttGate        // gated attention: the gates [rows·Q]
	sGate           // FFN gate (dense, a routed expert's rows, the shared expert) [rows·F]
	sUp             // FFN up [rows·F]
	sQKV            // DeltaNet: attn_qkv's output, convolved in place [rows·ConvDim]
	sZ              // DeltaNet: attn_gate's output z [rows·V]
	sAlpha          // DeltaNet: ssm_alpha's output, then the decay g [rows·VHeads]
	sBeta           // DeltaNet: ssm_beta's output, then sigmoid [rows·VHeads]
	sDN             // DeltaNet: the recurrence's output, gated-normed in place [rows·V]
	sState          // DeltaNet: per head running at once, its state and delta (HeadDim² + HeadDim)
	sBCX            // short conv: in_proj's output B|C|x [rows·3E]
	sBX             // short conv: B⊙x, convolved in place [rows·E]
	sY              // short conv: C⊙conv [rows·E]
	sLogits         // MoE: router logits [rows·n_expert]
	sProbs          // MoE: one token's probabilities (and selection scores with a bias) [n_expert or 2·n_expert]
	sSelW           // MoE: the selected experts' weights [rows·k]
	sXE             // MoE: the rows routed to one expert [rows·E]
	sYE             // MoE: one expert's output rows; then the shared expert's output [rows·E]
	sSlots          // MoE: the weighted expert outputs per (token, slot) [rows·k·E]
	sMoEOut         // MoE: the FFN output [rows·E]
	numScratch
)

// scratchNeed is what one block kind needs: float32 values per buffer and ints (MoE routing).
type scratchNeed struct {
	f    [numScratch]int
	ints int
}

// need returns the scratch a block of kind k needs for rows = nSeq·seqLen rows.
func (c *Config) need(k LayerKind, rows, seqLen int) scratchNeed {
	var n scratchNeed
	e := c.NEmbd
	n.f[sX] = rows * e
	switch k.Mixer {
	case MixerAttention, MixerGatedAttention:
		n.f[sQ], n.f[sK], n.f[sV], n.f[sAtt] = rows*c.QDim(), rows*c.KVDim(), rows*c.KVDim(), rows*c.QDim()
		n.f[sScores] = attentionScratch(c.NHead, seqLen)
		if k.Mixer == MixerGatedAttention {
			n.f[sQG], n.f[sAttGate] = 2*rows*c.QDim(), rows*c.QDim()
		}
	case MixerDeltaNet:
		s := c.SSM
		n.f[sQKV], n.f[sZ], n.f[sAlpha], n.f[sBeta], n.f[sDN] = rows*s.ConvDim(), rows*s.ValueDim(), rows*s.VHeads, rows*s.VHeads, rows*s.ValueDim()
		n.f[sState] = parallel.Workers(s.VHeads) * (s.HeadDim*s.HeadDim + s.HeadDim)
	case MixerShortConv:
		n.f[sBCX], n.f[sBX], n.f[sY] = 3*rows*e, rows*e, rows*e
	}
	switch k.FFN {
	case FFNDense:
		n.f[sGate], n.f[sUp] = rows*c.NFF, rows*c.NFF
	case FFNMoE:
		kk, f := c.NExpertUsed, max(c.ExpertFF(), c.NFFShared)
		n.f[sGate], n.f[sUp] = rows*f, rows*f
		n.f[sLogits], n.f[sProbs], n.f[sSelW] = rows*c.NExpert, c.NExpert, rows*kk
		if c.ExpertBias {
			n.f[sProbs] = 2 * c.NExpert
		}
		n.f[sXE], n.f[sYE], n.f[sSlots], n.f[sMoEOut] = rows*e, rows*e, rows*kk*e, rows*e
		n.ints = 2 * rows * kk // selected experts and the routed (token, slot) pairs of one expert
	}
	return n
}

// scratch holds a Model's forward-pass temporaries.
type scratch struct {
	f           [numScratch][]float32
	sel, routed []int
}

// get makes every buffer at least as large as a block of kind k needs for rows rows.
func (s *scratch) get(c *Config, k LayerKind, rows, seqLen int) *scratch {
	n := c.need(k, rows, seqLen)
	for i, v := range n.f {
		if len(s.f[i]) < v {
			s.f[i] = make([]float32, v)
		}
	}
	if half := n.ints / 2; len(s.sel) < half {
		s.sel, s.routed = make([]int, half), make([]int, 0, half)
	}
	return s
}

// buf returns the first n values of buffer i.
func (s *scratch) buf(i, n int) []float32 { return s.f[i][:n] }

// ScratchBytes is the memory RunLayer keeps for one sequence of t tokens: BatchScratchBytes(1, t).
func (c *Config) ScratchBytes(t int) int64 { return c.BatchScratchBytes(1, t) }

// BatchScratchBytes is the memory a Model keeps after running nSeq sequences of seqLen tokens through
// its blocks (RunLayerBatch): every scratch buffer at the largest size one of the model's block kinds
// needs, for rows = nSeq·seqLen rows. Per row: the normed input; attention Q, K, V and output
// (4·(E + 2Q + 2KV) bytes; gated attention 12·Q more); dense FFN gate and up (8·F); DeltaNet q|k|v, z,
// alpha, beta, output (4·(ConvDim + 2V + 2·VHeads)); short conv B|C|x, B⊙x, C⊙conv (20·E); MoE router
// logits, routing (8+4+8 bytes per slot), the rows of one expert, its output, the weighted outputs per
// slot and the FFN output (4·(X + 3E + kE) + 20k), expert gate and up (8·max(F_exp, F_shared)).
// Per sequence (attention and recurrence run one sequence at a time): a seqLen×seqLen score matrix per
// head running at once (the count depends on GOMAXPROCS), a DeltaNet state per head running at once.
func (c *Config) BatchScratchBytes(nSeq, seqLen int) int64 {
	rows := nSeq * seqLen
	var most scratchNeed
	for _, l := range c.kindLayers() {
		n := c.need(c.Kind(l), rows, seqLen)
		for i, v := range n.f {
			most.f[i] = max(most.f[i], v)
		}
		most.ints = max(most.ints, n.ints)
	}
	var b int64
	for _, v := range most.f {
		b += 4 * int64(v)
	}
	return b + 8*int64(most.ints)
}
