package calib

import (
	"orkpipe/ork/model"
)

// EstimateMemory predicts the peak memory (bytes) of Capture for window w of a model shaped c, over
// nSeq sequences of seqLen tokens, when the weights come from a source holding them as c.WeightType says
// (a model.GGUFSource with KeepEncoded, as the calibrate stage reads them; a float32 source such as
// model.SyntheticSource has WeightType F32). It counts what Capture holds at once:
//
//   - the window's Hessians: 8·K² per captured site of every block (model.Config.Sites, [Captured]),
//     times the experts of an expert site (every expert's, whether or not tokens reach it);
//   - the window's weights as held: every matmul weight of every site (model.Config.WeightBytes:
//     encoded, e.g. Q8_0 1.0625 bytes a value, or float32; the MoE router float32; an expert tensor's
//     every slice) and the block's vectors (LayerVectorBytes);
//   - the activations in flight (ActivationMemory) and the Hessians' row batches (RowBatchBytes).
//
// At Mixtral's shape (E 4096, F 14336, 8 experts) an MoE block holds about 13.5 GiB of Hessians and 5.4
// GiB of float32 expert weights; a 27B-shaped dense llama block (E 5120, F 17408) 2.8 GiB of Hessians.
func EstimateMemory(c *model.Config, w Window, nSeq, seqLen int) int64 {
	var b int64
	for l := w.Start; l < w.End; l++ {
		b += windowHessianBytes(c, w, l) + LayerWeightBytes(c, l)
	}
	return b + ActivationMemory(c, nSeq, seqLen) + RowBatchBytes(c, w, nSeq, seqLen)
}

// LayerHessianBytes is the memory of the Hessians Capture accumulates for block l.
func LayerHessianBytes(c *model.Config, l int) int64 {
	return windowHessianBytes(c, Window{Start: l, End: l + 1}, l)
}

// windowHessianBytes is the memory of the Hessians window w accumulates for its block l.
func windowHessianBytes(c *model.Config, w Window, l int) int64 {
	var b int64
	for i, s := range c.Sites(l) {
		if w.Captures(l, model.Input(i), s) {
			b += 8 * int64(s.Width) * int64(s.Width) * int64(max(1, s.Experts))
		}
	}
	return b
}

// LayerWeightBytes is the memory a window holds for block l's weights: every site weight as held (the
// MoE router as float32), times the experts of an expert site, and the block's vectors.
func LayerWeightBytes(c *model.Config, l int) int64 {
	var b int64
	for _, s := range c.Sites(l) {
		for _, m := range s.Weights {
			per := c.WeightBytes(m.N, s.Width)
			if !Captured(s) {
				per = 4 * int64(m.N) * int64(s.Width)
			}
			b += per * int64(max(1, s.Experts))
		}
	}
	return b + LayerVectorBytes(c, l)
}

// LayerVectorBytes bounds the float32 tensors block l holds besides its matmul weights (model.Layer):
// the two norms; per-head q/k norms (attention); the DeltaNet's convolution taps (ConvKernel × ConvDim),
// ssm_dt.bias, ssm_a and ssm_norm; the short convolution's taps (l_cache × 3·NEmbd channels, an upper
// bound); an MoE block's expert bias and the shared expert's gate vector.
func LayerVectorBytes(c *model.Config, l int) int64 {
	e := int64(c.NEmbd)
	n := 2 * e
	k := c.Kind(l)
	switch k.Mixer {
	case model.MixerAttention, model.MixerGatedAttention:
		n += 2 * int64(c.HeadDim)
	case model.MixerDeltaNet:
		s := c.SSM
		n += int64(s.ConvKernel)*int64(s.ConvDim()) + 2*int64(s.VHeads) + int64(s.HeadDim)
	case model.MixerShortConv:
		n += int64(c.ShortConvL) * 3 * e
	}
	if k.FFN == model.FFNMoE {
		n += int64(c.NExpert) + e
	}
	return 4 * n
}

// ChunkRows is the rows (tokens) a propagate or capture of nSeq sequences of seqLen tokens runs through a
// block at once (chunkSeqs of the sequences, at most nSeq): every matmul weight's Apply takes them all
// (model.Model.RunLayerBatch), a routed expert's those routed to it.
func ChunkRows(c *model.Config, nSeq, seqLen int) int {
	return min(chunkSeqs(c, seqLen), nSeq) * seqLen
}

// ActivationMemory is the memory of the activations in flight in Capture or Propagate, nSeq sequences of
// seqLen tokens: a chunk of C = chunkSeqs sequences of hidden states (4·C·T·E), the input reader's values
// and byte buffer and the output writer's byte buffer of one sequence (3 × 4·T·E), the forward pass's
// scratch for the chunk (model.Config.BatchScratchBytes, which counts the MoE routing buffers) and the
// dequantization scratch of one Apply of an encoded weight (model.Config.BlockScratchBytes).
func ActivationMemory(c *model.Config, nSeq, seqLen int) int64 {
	e, t := int64(c.NEmbd), int64(seqLen)
	chunk := int64(min(chunkSeqs(c, seqLen), nSeq))
	return 4*chunk*t*e + 3*4*t*e + c.BatchScratchBytes(int(chunk), seqLen) + c.BlockScratchBytes()
}

// RowBatchBytes is the memory of Capture's float64 row batches for window w: one per site position (and
// kind, shared or per expert), as wide as the widest such site of the window, 8·R bytes per value, R =
// min(BatchRows, nSeq·seqLen) rows, and in the pure-Go build the update's packed copy of the rows in the
// same buffer (gramScratch: about as many values again).
func RowBatchBytes(c *model.Config, w Window, nSeq, seqLen int) int64 {
	widest := map[[2]int]int64{}
	for l := w.Start; l < w.End; l++ {
		for i, s := range c.Sites(l) {
			if w.Captures(l, model.Input(i), s) {
				k := [2]int{i, min(s.Experts, 1)}
				widest[k] = max(widest[k], int64(s.Width))
			}
		}
	}
	r := batchRows(nSeq, seqLen)
	var values int64
	for _, k := range widest {
		values += int64(r)*k + int64(gramScratch(int(k), r))
	}
	return 8 * values
}
