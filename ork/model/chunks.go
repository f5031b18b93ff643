package model

import (
	"context"
	"fmt"

	"orkpipe/ork/internal/sgemm"
)

// evalGroupBytes bounds the hidden states an evaluation holds for the group of chunks it runs through
// each block at once (every model's).
const evalGroupBytes = 256 << 20

// EvalGroupChunks is the number of chunks of ctx tokens [Evaluate] and [EvaluateKLBase] run through
// each block at once when they run models models of n_embd e: as many as 256 MiB of float32 hidden
// states hold (all the models'), at least one. Their hidden states take at most
// EvalGroupChunks·models·ctx·e·4 bytes.
func EvalGroupChunks(e, ctx, models int) int {
	return max(1, evalGroupBytes/(4*models*max(1, ctx)*max(1, e)))
}

// evalModel is one model an evaluation runs on every chunk, and the Observer (nil: none) that sees its
// forward passes.
type evalModel struct {
	m   *Model
	obs Observer
}

// forEachChunk runs chunks chunks of ctx tokens (chunk c's tokens set by tokens(c, dst)) through every
// model and calls score(c, logits) in chunk order, logits[i] the logits of models[i]. The chunks go a
// group at a time (EvalGroupChunks): each block of a model is loaded once for the group and run on its
// chunks one after another, each chunk a sequence of its own from position 0 — the arithmetic of
// Forward on each chunk alone, bit for bit, and an Observer sees each block's chunks in chunk order —
// instead of every block being loaded again for every chunk. With GGMLExact a model's GGMLUbatch is set
// for each chunk as llama-perplexity batches it (perplexityUbatch).
// progress, when not nil, is called after each step: a block of a model run on a group, or a chunk
// scored (evalSteps of them).
func forEachChunk(ctx context.Context, models []evalModel, chunks, n int, tokens func(c int, dst []int32), score func(c int, logits [][]float32) error, progress func(done, total int)) error {
	return forEachChunkIn(ctx, models, chunks, n, EvalGroupChunks(models[0].m.Cfg.NEmbd, n, len(models)), tokens, score, progress)
}

// evalSteps is the number of steps of forEachChunk: every block of every model once per group of
// group chunks, and every chunk.
func evalSteps(models []evalModel, chunks, group int) int {
	blocks := 0
	for _, em := range models {
		blocks += em.m.Cfg.NLayer
	}
	return (chunks+group-1)/group*blocks + chunks
}

// forEachChunkIn is forEachChunk in groups of group chunks.
func forEachChunkIn(ctx context.Context, models []evalModel, chunks, n, group int, tokens func(c int, dst []int32), score func(c int, logits [][]float32) error, progress func(done, total int)) error {
	total, done := evalSteps(models, chunks, group), 0
	step := func() {
		if done++; progress != nil {
			progress(done, total)
		}
	}
	for c0 := 0; c0 < chunks; c0 += group {
		c1 := min(c0+group, chunks)
		seqs := make([][]int32, c1-c0)
		for i := range seqs {
			seqs[i] = make([]int32, n)
			tokens(c0+i, seqs[i])
		}
		hidden := make([][][]float32, len(models))
		for i, em := range models {
			var ubatch func(int) int
			if em.m.GGMLExact {
				ubatch = func(s int) int { return perplexityUbatch(n, c0+s, chunks) }
			}
			h, err := em.m.forwardSeqs(ctx, seqs, em.obs, ubatch, step)
			if err != nil {
				return fmt.Errorf("chunks %d-%d: %w", c0, c1-1, err)
			}
			hidden[i] = h
		}
		logits := make([][]float32, len(models))
		for s := range seqs {
			for i, em := range models {
				l, err := em.m.Logits(ctx, hidden[i][s])
				if err != nil {
					return fmt.Errorf("chunk %d: %w", c0+s, err)
				}
				hidden[i][s], logits[i] = nil, l
			}
			if err := score(c0+s, logits); err != nil {
				return err
			}
			step()
		}
	}
	return nil
}

// forwardSeqs runs each sequence (from position 0; all of one length) through every block, each block
// loaded once and run on the sequences one after another (RunLayer; an MoE block's routed experts on all
// of their tokens at once where that gives the same bits, runMoESeqs), and returns their hidden states
// after the last block: for each sequence what ForwardObserved computes before the logits, bit for bit.
// ubatch, when not nil, gives GGMLUbatch for sequence s; block, when not nil, is called after each block.
func (m *Model) forwardSeqs(ctx context.Context, seqs [][]int32, obs Observer, ubatch func(s int) int, block func()) ([][]float32, error) {
	n := len(seqs[0])
	per := n * m.Cfg.NEmbd
	h := make([]float32, len(seqs)*per) // one slice: runMoESeqs takes the sequences' rows at once
	hs := make([][]float32, len(seqs))
	for s, toks := range seqs {
		if len(toks) != n {
			return nil, fmt.Errorf("sequences of %d and %d tokens: %w", n, len(toks), ErrBadModel)
		}
		e, err := m.Embed(ctx, toks) // positions in errors count from the sequence's start
		if err != nil {
			return nil, fmt.Errorf("sequence %d: %w", s, err)
		}
		hs[s] = h[s*per : (s+1)*per : (s+1)*per]
		copy(hs[s], e)
	}
	for i := 0; i < m.Cfg.NLayer; i++ {
		l, err := LoadLayer(ctx, &m.Cfg, m.Src, i)
		if err != nil {
			return nil, err
		}
		if ubatch == nil && m.moeTogether(l, len(hs), obs) {
			err = m.runMoESeqs(ctx, l, h, n, obs)
		} else {
			for s, hh := range hs {
				if ubatch != nil {
					m.GGMLUbatch = ubatch(s)
				}
				if err = m.RunLayer(ctx, l, hh, obs); err != nil {
					break
				}
			}
		}
		l.Release()
		if err != nil {
			return nil, err
		}
		if block != nil {
			block()
		}
	}
	return hs, nil
}

// rowIndependent is implemented by Linears that can say whether each output row they compute depends only on
// its input row: not on the other rows of the call nor on their number.
type rowIndependent interface {
	rowIndependent() bool
}

// rowIndependent: in the pure-Go build a product of N >= 193 rows is summed in slices of K for any number of
// tokens (sgemm.Sliced); under OpenBLAS the blocking depends on the shape.
func (d *Dense) rowIndependent() bool { return gonumSgemm() && sgemm.Sliced(d.N) }

// rowIndependent: as Dense (Apply reproduces the path of the whole product in every block).
func (e *Encoded) rowIndependent() bool { return gonumSgemm() && sgemm.Sliced(e.N) }

// rowIndependent: each token is quantized and multiplied on its own (integer dot products, exact).
func (e *Emulated) rowIndependent() bool { return true }

func (l linearWithBias) rowIndependent() bool { return isRowIndependent(l.Linear) }

func isRowIndependent(l Linear) bool {
	r, ok := l.(rowIndependent)
	return ok && r.rowIndependent()
}

// ExpertsRowIndependent reports whether every routed expert's products give each row the same bits
// whatever other rows, and however many, share the call: an MoE model in the pure-Go build whose expert
// matrices are all at least 193 rows wide (sgemm.Sliced: NEmbd and ExpertFF), Dense, Encoded or
// Emulated. Then a block's experts may take the rows of any number of sequences at once (calib's
// chunks of several sequences; a chunk's other products, of at least 193 rows, are sliced too).
func (c *Config) ExpertsRowIndependent() bool {
	return c.MoE() && gonumSgemm() && sgemm.Sliced(c.ExpertFF()) && sgemm.Sliced(c.NEmbd)
}

// moeGroupBytes bounds the scratch of the routed experts applied to the tokens of several sequences at
// once (runMoESeqs).
const moeGroupBytes = 256 << 20

// moeTogether reports whether block l's routed experts may run on the tokens of nSeq sequences at once,
// each sequence still getting RunLayer's bits: an MoE block whose every expert weight is row-independent, and
// obs (nil or not) not an ExpertObserver, which sees each expert's rows per call.
func (m *Model) moeTogether(l *Layer, nSeq int, obs Observer) bool {
	if nSeq < 2 || l.Kind.FFN != FFNMoE {
		return false
	}
	if _, ok := obs.(ExpertObserver); ok {
		return false
	}
	for _, ex := range l.Experts {
		if !isRowIndependent(ex.Gate) || !isRowIndependent(ex.Up) || !isRowIndependent(ex.Down) {
			return false
		}
	}
	return true
}

// moeKind is the kind whose scratch (Config.need) is only what runMoESeqs holds for all the
// sequences' rows: their FFN inputs (sX) and the MoE buffers.
var moeKind = LayerKind{Mixer: -1, FFN: FFNMoE}

// moeSeqs is the number of sequences of seqLen rows runMoESeqs takes at once: as many as moeGroupBytes
// of scratch hold (Config.moeSeqs), or testMoESeqs.
func (m *Model) moeSeqs(seqLen int) int {
	if m.testMoESeqs > 0 {
		return m.testMoESeqs
	}
	return m.Cfg.moeSeqs(seqLen)
}

// moeSeqs is the number of sequences of seqLen rows whose MoE scratch (moeScratch) fits moeGroupBytes,
// at least one.
func (c *Config) moeSeqs(seqLen int) int {
	return max(1, moeGroupBytes/max(1, int(c.moeScratch(1, seqLen))))
}

// moeScratch is the scratch runMoESeqs holds for nSeq sequences of seqLen rows.
func (c *Config) moeScratch(nSeq, seqLen int) int64 {
	n := c.need(moeKind, nSeq*seqLen, seqLen)
	var b int64
	for _, v := range n.f {
		b += 4 * int64(v)
	}
	return b + 8*int64(n.ints)
}

// EvalScratchBytes is the scratch memory a Model keeps after [Evaluate] or [EvaluateKLBase] ran chunks
// chunks of ctx tokens through it beside models-1 other models (chunks 0: any number): a chunk's
// (ScratchBytes), and for an MoE model the routed experts' scratch of the sequences runMoESeqs takes at
// once (evalMoEChunks of them, at most 256 MiB).
func (c *Config) EvalScratchBytes(ctx, models, chunks int) int64 {
	b := c.ScratchBytes(ctx)
	if c.MoE() {
		b += c.moeScratch(c.evalMoEChunks(ctx, models, chunks), ctx)
	}
	return b
}

// EvalExpertTokens is the most tokens one Apply of a routed expert's weight takes when [Evaluate] or
// [EvaluateKLBase] runs chunks chunks of ctx tokens (0: any number; EvalChunks is the count Evaluate
// runs) through the model beside models-1 other models: runMoESeqs hands each expert every row routed
// to it (each row at most once) of the chunks it takes at once (evalMoEChunks: up to moeSeqs chunks, no
// more than a group of them, EvalGroupChunks, and no more than the evaluation runs), so up to that many
// chunks' tokens, not ctx. Every other weight's Apply (and an expert's where the chunks run one by one)
// takes one chunk, ctx tokens; so does every Apply of a model without routed experts (EvalExpertTokens
// is then ctx).
func (c *Config) EvalExpertTokens(ctx, models, chunks int) int {
	if !c.MoE() {
		return ctx
	}
	return c.evalMoEChunks(ctx, models, chunks) * ctx
}

// evalMoEChunks is the most chunks of ctx tokens runMoESeqs takes at once in an evaluation of chunks
// chunks (0: any number) beside models-1 other models: moeSeqs of them, at most a group
// (EvalGroupChunks: forEachChunk runs a block on a group's chunks), at most chunks.
func (c *Config) evalMoEChunks(ctx, models, chunks int) int {
	n := min(c.moeSeqs(ctx), EvalGroupChunks(c.NEmbd, ctx, models))
	if chunks > 0 {
		n = min(n, chunks)
	}
	return n
}

// EvalChunks is the number of chunks of ctx tokens [Evaluate] runs over tokens tokens with MaxChunks
// maxChunks (0: every chunk): tokens/ctx, at most maxChunks.
func EvalChunks(tokens, ctx, maxChunks int) int {
	chunks := tokens / max(1, ctx)
	if maxChunks > 0 {
		chunks = min(chunks, maxChunks)
	}
	return chunks
}

// runMoESeqs applies MoE block l to the hidden states h of len(h)/(seqLen·NEmbd) sequences in place,
// each sequence bit for bit as RunLayer on it alone (moeTogether must hold): the mixer half, the
// router, the routing's observation and the shared expert one sequence at a time, the routed experts
// once for the tokens of up to moeSeqs sequences. obs sees each site's sequences in order (the order
// across a block's sites differs from RunLayer's).
func (m *Model) runMoESeqs(ctx context.Context, l *Layer, h []float32, seqLen int, obs Observer) error {
	c := &m.Cfg
	e := c.NEmbd
	per := seqLen * e
	step := m.moeSeqs(seqLen) * per
	for h0 := 0; h0 < len(h); h0 += step {
		hg := h[h0:min(h0+step, len(h))]
		rows := len(hg) / e
		g := m.group.get(c, moeKind, rows, seqLen)
		xg := g.buf(sX, rows*e)
		for s0 := 0; s0 < len(hg); s0 += per {
			if err := ctx.Err(); err != nil {
				return err
			}
			x, err := m.mixerHalf(l, hg[s0:s0+per], seqLen, m.buf.get(c, l.Kind, seqLen, seqLen), obs)
			if err != nil {
				return err
			}
			if obs != nil {
				obs.Observe(l.Index, InputRouter, x)
			}
			copy(xg[s0:], x)
		}
		out := g.buf(sMoEOut, rows*e)
		if err := m.runMoE(l, xg, out, g, obs, seqLen); err != nil {
			return err
		}
		for i, v := range out {
			hg[i] += v
		}
	}
	return nil
}
