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
//   - one sequence: the hidden states (4·T·E), the input reader's and output writer's byte buffers
//     (2 × 4·T·E), the forward pass's scratch (model.Config.ScratchBytes, which counts the MoE routing
//     buffers), the float64 copy of the widest linear input used for accumulation (8·T·max(E, Q, F))
//     and the dequantization scratch of one Apply of an encoded weight (model.Config.BlockScratchBytes).
//
// An MoE block (X = n_expert) instead holds per block 8·(E² + Q²) + X·8·(E² + F²) of Hessians (every
// expert's, whether or not tokens reach it) and, besides attention and norms, the float32 router (4·X·E)
// and every expert slice (X × (2 × F×E + E×F) as held): at Mixtral's shape (E 4096, F 14336, X 8) about
// 13.5 GiB of Hessians and 5.4 GiB of float32 weights per block.
func EstimateMemory(c *model.Config, w Window, seqLen int) int64 {
	e, q, f := int64(c.NEmbd), int64(c.QDim()), int64(c.NFF)
	E, Q, KV, F := c.NEmbd, c.QDim(), c.KVDim(), c.NFF
	t := int64(seqLen)
	layers := int64(w.End - w.Start)
	hess := 8 * (e*e + q*q + e*e + f*f)
	attn := c.WeightBytes(Q, E) + 2*c.WeightBytes(KV, E) + c.WeightBytes(E, Q) + 4*2*e
	ffn := 2*c.WeightBytes(F, E) + c.WeightBytes(E, F)
	weights := attn + ffn
	if c.MoE() {
		x := int64(c.NExpert)
		hess = 8*(e*e+q*q) + x*8*(e*e+f*f)
		weights = attn + 4*x*e + x*ffn
	}
	widest := max(e, q, f)
	perSeq := 4*t*e + 2*4*t*e + c.ScratchBytes(seqLen) + 8*t*widest + c.BlockScratchBytes()
	return layers*(hess+weights) + perSeq
}
