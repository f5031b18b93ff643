package calib

import (
	"context"
	"fmt"

	"orkpipe/ork/model"
	"orkpipe/ork/quant"
)

// countRouting is the tests' independent count of routing: it runs the token sequences (all of one
// length) through every block of the MoE model m, one block at a time over all sequences, and returns
// how the blocks routed them — for the same sequences the same counts and masses, bit for bit, as
// calibration records in one-shot mode (the same chunks of sequences go through each block).
func countRouting(ctx context.Context, m *model.Model, seqs [][]int32) (Routing, error) {
	c := &m.Cfg
	if !c.MoE() {
		return Routing{}, fmt.Errorf("%w: counting routing: the model has no mixture-of-experts blocks", ErrShape)
	}
	if len(seqs) == 0 || len(seqs[0]) == 0 {
		return Routing{}, fmt.Errorf("%w: counting routing: no tokens", ErrShape)
	}
	t, e := len(seqs[0]), c.NEmbd
	h := make([]float32, len(seqs)*t*e)
	for i, s := range seqs {
		if len(s) != t {
			return Routing{}, fmt.Errorf("%w: counting routing: sequence %d has %d tokens, sequence 0 has %d", ErrShape, i, len(s), t)
		}
		x, err := m.Embed(ctx, s)
		if err != nil {
			return Routing{}, err
		}
		copy(h[i*t*e:], x)
	}
	defer quant.SingleThreadedBLAS()() // as calibration: under -tags blas its products run in per-core panels
	counter := NewRouteCounter(c.NExpert, c.NExpertUsed)
	chunk := min(chunkSeqs(c, t), len(seqs)) * t * e
	for l := 0; l < c.NLayer; l++ {
		ly, err := model.LoadLayer(ctx, c, m.Src, l)
		if err != nil {
			return Routing{}, err
		}
		for a := 0; a < len(h) && err == nil; a += chunk {
			if err = m.RunLayerBatch(ctx, ly, h[a:min(a+chunk, len(h))], t, counter); err != nil {
				err = fmt.Errorf("counting routing, layer %d, sequences from %d: %w", l, a/(t*e), err)
			}
		}
		ly.Release() // unmaps the weights of a GGUFSource with MapEncoded
		if err != nil {
			return Routing{}, err
		}
		if counter.err != nil {
			return Routing{}, counter.err
		}
	}
	return counter.Routing()
}
