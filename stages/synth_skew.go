package stages

import (
	"fmt"
	"math"
	"strings"

	"orkpipe/ork/gguf"
)

// The router skew (SynthParams.RouterSkew = s > 0) biases the routing of a synthetic MoE model on purpose,
// so that some experts serve far more tokens than others, as trained MoE models' routers do. Llama's
// router has no bias term, so the model carries one in a constant channel of the residual stream: every
// token embedding holds skewChannelValue in channel skewChannel, and no block writes that channel (row
// skewChannel of every attn_output and ffn_down(_exps) slice is zero), so every block's ffn_norm output
// x has x[skewChannel] > 0 for every token (about skewChannelX: 0.81 ± 0.12 and 0.51 ± 0.12 in the two
// blocks of a 2-layer n_embd 64 model; it moves only with the token's RMS). Router
// row e of block l then holds −s·ln(1 + rank_l(e)) / skewChannelX in that channel, rank_l a permutation
// of the experts drawn per block: expert e's logit moves by about −s·ln(1 + rank), its softmax weight by
// (1 + rank)^−s, Zipf-like popularity on top of the random rows' own preferences.
const (
	skewChannel      = 0
	skewChannelValue = 1
	skewChannelX     = 0.65
)

// routerSkew is what the skew does to one tensor's rows.
type routerSkew struct {
	tensor string
	embd   int64
	rank   []int // router: the experts' popularity ranks
	s      float64
}

// newRouterSkew returns the skew of tensor t, or nil when the model has none or t is untouched.
func newRouterSkew(p SynthParams, t gguf.TensorInfo) *routerSkew {
	if p.RouterSkew == 0 || p.Experts == 0 {
		return nil
	}
	sk := &routerSkew{embd: int64(p.Embd), s: p.RouterSkew}
	switch {
	case t.Name == "token_embd.weight":
		sk.tensor = "embd"
	case !strings.HasPrefix(t.Name, "blk."):
		return nil
	case strings.HasSuffix(t.Name, ".ffn_gate_inp.weight"):
		sk.tensor, sk.rank = "router", synthRNG(p.Seed, t.Name+".router_skew").Perm(p.Experts)
	case strings.HasSuffix(t.Name, ".attn_output.weight"), strings.HasSuffix(t.Name, ".ffn_down.weight"), strings.HasSuffix(t.Name, ".ffn_down_exps.weight"):
		sk.tensor = "writer"
	default:
		return nil
	}
	return sk
}

// apply changes row r of the tensor.
func (sk *routerSkew) apply(r int64, row []float32) {
	switch {
	case sk == nil:
	case sk.tensor == "embd":
		row[skewChannel] = skewChannelValue
	case sk.tensor == "router":
		row[skewChannel] = float32(-sk.s * math.Log(1+float64(sk.rank[r])) / skewChannelX)
	case r%sk.embd == skewChannel: // an output row (of one expert slice) writing the channel
		clear(row)
	}
}

func (p SynthParams) validateSkew() error {
	if math.IsNaN(p.RouterSkew) || p.RouterSkew < 0 || p.RouterSkew > 16 {
		return fmt.Errorf("router_skew %v: want 0 (none) .. 16", p.RouterSkew)
	}
	if p.RouterSkew > 0 && (p.Experts == 0 || p.Arch != "") {
		return fmt.Errorf("router_skew %v: set on a model without experts (n_expert 0) or not of arch llama", p.RouterSkew)
	}
	return nil
}
