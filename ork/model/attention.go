package model

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"orkpipe/ork/internal/parallel"
	"orkpipe/ork/model/internal/fma"
	"orkpipe/ork/model/internal/softmax"
)

// attentionBlock is the attention mixer of block l: from x (the attn_norm output, rows × NEmbd) it
// computes q = attn_q·x, k = attn_k·x, v = attn_v·x (with biases where the model has them), per-head
// RMS norms of q and k where the model has them, RoPE and causal attention per sequence, and writes
// attn_output·attention into x.
func (m *Model) attentionBlock(l *Layer, x []float32, seqLen int, s *scratch, obs Observer) error {
	c := &m.Cfg
	rows := len(x) / c.NEmbd
	qd, kvd := c.QDim(), c.KVDim()
	q, k, v := s.buf(sQ, rows*qd), s.buf(sK, rows*kvd), s.buf(sV, rows*kvd)
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
		m.norm(q, q, l.QNorm, c.HeadDim)
	}
	if l.KNorm != nil {
		m.norm(k, k, l.KNorm, c.HeadDim)
	}
	att := s.buf(sAtt, rows*qd)
	m.attendSequences(att, q, k, v, seqLen, s)
	if obs != nil {
		obs.Observe(l.Index, InputAttnO, att)
	}
	if err := l.O.Apply(x, att); err != nil {
		return fmt.Errorf("blk.%d.attn_output: %w", l.Index, err)
	}
	return nil
}

// gatedAttention is qwen35's full-attention mixer: attn_q·x holds per head h the query (values
// [2h·hd, 2h·hd+hd)) and a gate (the next hd values); q and k are RMS-normed per head, roped (IMROPE)
// and attended per sequence, and attn_output reads attention ⊙ sigmoid(gate).
func (m *Model) gatedAttention(l *Layer, x []float32, seqLen int, s *scratch, obs Observer) error {
	c := &m.Cfg
	rows := len(x) / c.NEmbd
	qd, kvd, hd := c.QDim(), c.KVDim(), c.HeadDim
	qg := s.buf(sQG, 2*rows*qd)
	if err := l.Q.Apply(qg, x); err != nil {
		return fmt.Errorf("blk.%d.attn_q: %w", l.Index, err)
	}
	q, gate := s.buf(sQ, rows*qd), s.buf(sAttGate, rows*qd)
	for r := 0; r < rows; r++ {
		for h := 0; h < c.NHead; h++ {
			src := qg[r*2*qd+2*h*hd:]
			copy(q[r*qd+h*hd:r*qd+(h+1)*hd], src[:hd])
			copy(gate[r*qd+h*hd:r*qd+(h+1)*hd], src[hd:2*hd])
		}
	}
	m.norm(q, q, l.QNorm, hd)
	k, v := s.buf(sK, rows*kvd), s.buf(sV, rows*kvd)
	if err := l.K.Apply(k, x); err != nil {
		return fmt.Errorf("blk.%d.attn_k: %w", l.Index, err)
	}
	if err := l.V.Apply(v, x); err != nil {
		return fmt.Errorf("blk.%d.attn_v: %w", l.Index, err)
	}
	m.norm(k, k, l.KNorm, hd)
	att := s.buf(sAtt, rows*qd)
	m.attendSequences(att, q, k, v, seqLen, s)
	for i, g := range gate {
		att[i] *= sigmoid(g)
	}
	if obs != nil {
		obs.Observe(l.Index, InputAttnO, att)
	}
	if err := l.O.Apply(x, att); err != nil {
		return fmt.Errorf("blk.%d.attn_output: %w", l.Index, err)
	}
	return nil
}

// attendSequences ropes q and k in place and computes causal attention into att, sequence by sequence
// (rows/seqLen sequences, positions restarting at 0): ggml's flash attention with GGMLExact, else
// softmax attention in float32.
func (m *Model) attendSequences(att, q, k, v []float32, seqLen int, s *scratch) {
	c := &m.Cfg
	qd, kvd := c.QDim(), c.KVDim()
	rope := m.ropeFor(seqLen)
	rope.fma = m.GGMLExact
	kvF16 := m.KVF16 || m.GGMLExact
	var scores []float32
	if !m.GGMLExact {
		scores = s.buf(sScores, attentionScratch(c.NHead, seqLen))
	}
	if kvF16 {
		roundF16(v)
	}
	for r0 := 0; r0*qd < len(q); r0 += seqLen {
		qs, ks, vs, out := q[r0*qd:(r0+seqLen)*qd], k[r0*kvd:(r0+seqLen)*kvd], v[r0*kvd:(r0+seqLen)*kvd], att[r0*qd:(r0+seqLen)*qd]
		rope.apply(qs, c.NHead, c.HeadDim)
		rope.apply(ks, c.NHeadKV, c.HeadDim)
		if kvF16 {
			roundF16(ks)
		}
		if m.GGMLExact {
			flashAttentionGGML(out, qs, ks, vs, seqLen, c.NHead, c.NHeadKV, c.HeadDim, m.GGMLUbatch)
			continue
		}
		attention(out, scores, qs, ks, vs, seqLen, c.NHead, c.NHeadKV, c.HeadDim)
	}
}

// roundF16 rounds every value of x to the nearest binary16 (ties to even), as ggml stores F16.
func roundF16(x []float32) { fma.Round16(x) }

// sigmoid is ggml's: 1/(1 + exp(-x)).
func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// attentionWorkers is the number of heads the Gemm path of attention computes at once.
func attentionWorkers(heads int) int { return parallel.Workers(heads) }

// attentionScratch is the float32 scratch attention needs for heads heads over t tokens: in the
// pure-Go build one causalRows×t block of scores per goroutine (causalAttention), else one t×t score
// matrix per head running at once.
func attentionScratch(heads, t int) int {
	if gonumSgemm() {
		return causalScratch(heads, t)
	}
	return attentionWorkers(heads) * t * t
}

// attention computes causal grouped-query attention: out (T rows of heads·hd) from q (same shape) and
// k, v (T rows of kvHeads·hd), with scoreBuf (attentionScratch(heads, t) values) as scratch. Per head:
// S = scale·Q·Kᵀ, a causal softmax of each row (float64 sum, as ggml), O = S·V. In the pure-Go build
// causalAttention computes only the causal half, bit for bit what gemmAttention gives with gonum's
// Sgemm; under -tags blas gemmAttention runs OpenBLAS's.
func attention(out, scoreBuf, q, k, v []float32, t, heads, kvHeads, hd int) {
	if gonumSgemm() {
		causalAttention(out, scoreBuf, q, k, v, t, heads, kvHeads, hd)
		return
	}
	gemmAttention(out, scoreBuf, q, k, v, t, heads, kvHeads, hd)
}

// gemmAttention is attention as two blas32 products a head over the whole T×T scores, heads in
// parallel; scoreBuf holds attentionWorkers(heads)·T·T values.
func gemmAttention(out, scoreBuf, q, k, v []float32, t, heads, kvHeads, hd int) {
	qd, kvd := heads*hd, kvHeads*hd
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	parallel.ForWorker(heads, attentionWorkers(heads), func(w, h int) {
		s := scoreBuf[w*t*t : (w+1)*t*t]
		kh := h / group
		qm := blas32.General{Rows: t, Cols: hd, Stride: qd, Data: q[h*hd:]}
		km := blas32.General{Rows: t, Cols: hd, Stride: kvd, Data: k[kh*hd:]}
		sm := blas32.General{Rows: t, Cols: t, Stride: t, Data: s}
		blas32.Gemm(blas.NoTrans, blas.Trans, scale, qm, km, 0, sm)
		causalSoftmax(s, t)
		vm := blas32.General{Rows: t, Cols: hd, Stride: kvd, Data: v[kh*hd:]}
		om := blas32.General{Rows: t, Cols: hd, Stride: qd, Data: out[h*hd:]}
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, sm, vm, 0, om)
	})
}

// causalSoftmax replaces row i of the t×t matrix s by softmax(s[i][0..i]) and zeroes s[i][i+1..].
func causalSoftmax(s []float32, t int) {
	for i := 0; i < t; i++ {
		row := s[i*t : (i+1)*t]
		softmax.Row(row[:i+1])
		clear(row[i+1:])
	}
}
