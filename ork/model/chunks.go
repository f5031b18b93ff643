package model

import (
	"context"
	"fmt"
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
func forEachChunk(ctx context.Context, models []evalModel, chunks, n int, tokens func(c int, dst []int32), score func(c int, logits [][]float32) error) error {
	return forEachChunkIn(ctx, models, chunks, n, EvalGroupChunks(models[0].m.Cfg.NEmbd, n, len(models)), tokens, score)
}

// forEachChunkIn is forEachChunk in groups of group chunks.
func forEachChunkIn(ctx context.Context, models []evalModel, chunks, n, group int, tokens func(c int, dst []int32), score func(c int, logits [][]float32) error) error {
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
			h, err := em.m.forwardSeqs(ctx, seqs, em.obs, ubatch)
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
		}
	}
	return nil
}

// forwardSeqs runs each sequence (from position 0) through every block, each block loaded once and run
// on the sequences one after another (RunLayer), and returns their hidden states after the last block:
// for each sequence what ForwardObserved computes before the logits, bit for bit. ubatch, when not nil,
// gives GGMLUbatch for sequence s.
func (m *Model) forwardSeqs(ctx context.Context, seqs [][]int32, obs Observer, ubatch func(s int) int) ([][]float32, error) {
	hs := make([][]float32, len(seqs))
	for s, toks := range seqs {
		h, err := m.Embed(ctx, toks)
		if err != nil {
			return nil, err
		}
		hs[s] = h
	}
	for i := 0; i < m.Cfg.NLayer; i++ {
		l, err := LoadLayer(ctx, &m.Cfg, m.Src, i)
		if err != nil {
			return nil, err
		}
		for s, h := range hs {
			if ubatch != nil {
				m.GGMLUbatch = ubatch(s)
			}
			if err = m.RunLayer(ctx, l, h, obs); err != nil {
				break
			}
		}
		l.Release()
		if err != nil {
			return nil, err
		}
	}
	return hs, nil
}
