package calib

import (
	"orkpipe/ork/model"
)

// EstimateMemory predicts the peak memory (bytes) of Capture for window w of a model shaped c, with
// sequences of seqLen tokens. It counts what Capture holds at once:
//
//   - the window's Hessians: per block 8·(E² + Q² + E² + F²) (E = n_embd, Q = heads·head_dim, F = n_ff);
//   - the window's weights dequantized to float32: per block 4·(2·Q·E + 2·KV·E + 3·F·E + 2·E);
//   - one sequence: the hidden states (4·T·E), the input reader's and output writer's byte buffers
//     (2 × 4·T·E), the forward pass's scratch (model.Config.ScratchBytes, which counts the MoE routing
//     buffers) and the float64 copy of the widest linear input used for accumulation (8·T·max(E, Q, F)).
//
// An MoE block (X = n_expert) instead holds per block 8·(E² + Q²) + X·8·(E² + F²) of Hessians (every
// expert's, whether or not tokens reach it) and 4·(2·Q·E + 2·KV·E + X·E + X·3·F·E + 2·E) of weights
// (the router and every expert slice): at Mixtral's shape (E 4096, F 14336, X 8) about 13.5 GiB of
// Hessians and 5.4 GiB of weights per block.
func EstimateMemory(c *model.Config, w Window, seqLen int) int64 {
	e, q, kv, f := int64(c.NEmbd), int64(c.QDim()), int64(c.KVDim()), int64(c.NFF)
	t := int64(seqLen)
	layers := int64(w.End - w.Start)
	hess := 8 * (e*e + q*q + e*e + f*f)
	weights := 4 * (2*q*e + 2*kv*e + 3*f*e + 2*e)
	if c.MoE() {
		x := int64(c.NExpert)
		hess = 8*(e*e+q*q) + x*8*(e*e+f*f)
		weights = 4 * (2*q*e + 2*kv*e + x*e + x*3*f*e + 2*e)
	}
	widest := max(e, q, f)
	perSeq := 4*t*e + 2*4*t*e + c.ScratchBytes(seqLen) + 8*t*widest
	return layers*(hess+weights) + perSeq
}
