package calib

import (
	"orkpipe/ork/model"
)

// EstimateMemory predicts the peak memory (bytes) of Capture for window w of a model shaped c, with
// sequences of seqLen tokens, when the weights come from a source holding them as c.WeightType says (a
// model.GGUFSource with KeepEncoded, as the calibrate stage reads them; a float32 source such as
// model.SyntheticSource has WeightType F32). It counts what Capture holds at once:
//
//   - the window's Hessians: per block 8·(E² + Q² + E² + F²) (E = n_embd, Q = heads·head_dim, F = n_ff);
//   - the window's weights as held (model.Config.WeightBytes: encoded, e.g. Q8_0 1.0625 bytes a value,
//     or float32): per block the matrices Q×E, 2 × KV×E, E×Q, 2 × F×E and E×F, and the two norms
//     (4·2·E);
//   - the activations in flight: a chunk of C = chunkSeqs sequences of hidden states (4·C·T·E), the
//     input reader's values and byte buffer and the output writer's byte buffer of one sequence
//     (3 × 4·T·E), the forward pass's scratch for the chunk (model.Config.BatchScratchBytes, which
//     counts the MoE routing buffers), the dequantization scratch of one Apply of an encoded weight
//     (model.Config.BlockScratchBytes), and the float64 row batches the Hessians are updated from,
//     one per kind of input shared by the window's blocks: 8·R·(E + Q + E + F), R = min(BatchRows,
//     sequences × T) rows (in an MoE block the attention inputs' and the experts' gate/up and down).
//
// An MoE block (X = n_expert) instead holds per block 8·(E² + Q²) + X·8·(E² + F²) of Hessians (every
// expert's, whether or not tokens reach it) and, besides attention and norms, the float32 router (4·X·E)
// and every expert slice (X × (2 × F×E + E×F) as held): at Mixtral's shape (E 4096, F 14336, X 8) about
// 13.5 GiB of Hessians and 5.4 GiB of float32 weights per block.
func EstimateMemory(c *model.Config, w Window, nSeq, seqLen int) int64 {
	hess, weights := blockMemory(c)
	return int64(w.End-w.Start)*(hess+weights) + ActivationMemory(c, nSeq, seqLen, true)
}

// blockMemory returns what one block holds in Capture, as EstimateMemory counts it: its Hessians and its
// weights.
func blockMemory(c *model.Config) (hess, weights int64) {
	e, q, f := int64(c.NEmbd), int64(c.QDim()), int64(c.NFF)
	E, Q, KV, F := c.NEmbd, c.QDim(), c.KVDim(), c.NFF
	hess = 8 * (e*e + q*q + e*e + f*f)
	attn := c.WeightBytes(Q, E) + 2*c.WeightBytes(KV, E) + c.WeightBytes(E, Q) + 4*2*e
	ffn := 2*c.WeightBytes(F, E) + c.WeightBytes(E, F)
	weights = attn + ffn
	if c.MoE() {
		x := int64(c.NExpert)
		hess = 8*(e*e+q*q) + x*8*(e*e+f*f)
		weights = attn + 4*x*e + x*ffn
	}
	return hess, weights
}

// ActivationMemory is the memory of the activations in flight in Capture (hessians) or Propagate, for
// nSeq sequences of seqLen tokens, as EstimateMemory counts it.
func ActivationMemory(c *model.Config, nSeq, seqLen int, hessians bool) int64 {
	e, q, f, t := int64(c.NEmbd), int64(c.QDim()), int64(c.NFF), int64(seqLen)
	chunk := int64(min(chunkSeqs(seqLen), nSeq))
	b := 4*chunk*t*e + 3*4*t*e + c.BatchScratchBytes(int(chunk), seqLen) + c.BlockScratchBytes()
	if hessians {
		b += 8 * int64(batchRows(nSeq, seqLen)) * (e + q + e + f)
	}
	return b
}
