package model

import (
	"context"
	"fmt"

	"orkpipe/ork/pack"
)

// WeightSource provides a model's tensors by their GGUF names. Implementations read lazily: nothing is
// loaded until asked for, so a model can be run one layer at a time.
type WeightSource interface {
	// Vector returns a one-dimensional tensor (norm weights, biases) as float32; ok is false when the
	// tensor does not exist.
	Vector(ctx context.Context, name string) (v []float32, ok bool, err error)
	// Linear returns a matmul weight (ne[0] = K inputs, ne[1] = N outputs) as a Linear without bias;
	// ok is false when the tensor does not exist.
	Linear(ctx context.Context, name string) (l Linear, ok bool, err error)
	// Rows copies rows (of ne[0] values each) of a two-dimensional tensor into dst, in the order given.
	Rows(ctx context.Context, name string, rows []int32, dst []float32) error
}

// Layer holds the weights of one block. Which fields are set depends on Kind: attention (Q, K, V, O;
// QNorm/KNorm when the model has them), gated attention (the same, Q with 2·QDim rows), DeltaNet,
// ShortConv; a dense FFN (Gate, Up, Down) or an MoE FFN (Router, Experts, ExpProbsBias, Shared).
type Layer struct {
	Index            int
	Kind             LayerKind
	AttnNorm, FFNorm []float32 // the norms before the mixer and before the FFN (qwen35: post_attention_norm)
	QNorm, KNorm     []float32 // per-head RMSNorm of Q and K (qwen3, qwen35, lfm2), HeadDim values, or nil
	Q, K, V, O       Linear
	DeltaNet         *DeltaNetWeights
	ShortConv        *ShortConvWeights
	Gate, Up, Down   Linear // dense FFN blocks; nil in MoE blocks
	// Router is ffn_gate_inp (NExpert outputs of NEmbd) and Experts the NExpert expert FFNs, in MoE
	// blocks; both nil in dense blocks. ExpProbsBias is exp_probs_b (Config.ExpertBias), Shared the
	// shared expert (Config.NFFShared > 0), or nil.
	Router       Linear
	Experts      []Expert
	ExpProbsBias []float32
	Shared       *SharedExpert
}

// Expert is one expert FFN of an MoE block: slice e of ffn_gate_exps, ffn_up_exps and ffn_down_exps.
type Expert struct {
	Gate, Up, Down Linear
}

// SharedExpert is qwen35moe's shared expert: a SwiGLU FFN (ffn_{gate,up,down}_shexp) every token goes
// through, its output scaled by sigmoid(GateInp·x) (ffn_gate_inp_shexp, NEmbd values).
type SharedExpert struct {
	Gate, Up, Down Linear
	GateInp        []float32
}

// DeltaNetWeights are the weights of a Gated DeltaNet block (see deltaNet).
type DeltaNetWeights struct {
	QKV, Gate, Alpha, Beta, Out Linear    // attn_qkv, attn_gate (z), ssm_alpha, ssm_beta, ssm_out
	Conv                        []float32 // ssm_conv1d: ConvDim channels of ConvKernel taps
	DtBias, A                   []float32 // ssm_dt.bias and ssm_a (= -exp(A_log)), VHeads values
	Norm                        []float32 // ssm_norm: HeadDim values, shared by the value heads
}

// ShortConvWeights are the weights of an LFM2 short convolution block (see shortConv).
type ShortConvWeights struct {
	InProj, OutProj Linear    // shortconv.in_proj (3·NEmbd rows: B, C, x), shortconv.out_proj
	Conv            []float32 // shortconv.conv: NEmbd channels of ShortConvL taps
}

// linearWithBias wraps a Linear and adds a bias.
type linearWithBias struct {
	Linear
	bias []float32
}

func (l linearWithBias) Apply(y, x []float32) error {
	if err := l.Linear.Apply(y, x); err != nil {
		return err
	}
	n, _ := l.Dims()
	for t := 0; t < len(y); t += n {
		row := y[t : t+n]
		for i := range row {
			row[i] += l.bias[i]
		}
	}
	return nil
}

// Release unmaps the layer's weights that a GGUFSource with MapEncoded mapped from its file (every other
// weight is the collector's); the layer must not be run afterwards.
func (l *Layer) Release() {
	lins := []Linear{l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down, l.Router}
	if d := l.DeltaNet; d != nil {
		lins = append(lins, d.QKV, d.Gate, d.Alpha, d.Beta, d.Out)
	}
	if c := l.ShortConv; c != nil {
		lins = append(lins, c.InProj, c.OutProj)
	}
	for _, e := range l.Experts {
		lins = append(lins, e.Gate, e.Up, e.Down)
	}
	if s := l.Shared; s != nil {
		lins = append(lins, s.Gate, s.Up, s.Down)
	}
	for _, lin := range lins {
		releaseLinear(lin)
	}
}

// releaseLinear releases an Encoded weight, also inside the wrappers a GGUFSource puts around one.
func releaseLinear(l Linear) {
	switch v := l.(type) {
	case *Encoded:
		v.release()
	case *ggmlActLinear:
		releaseLinear(v.Linear)
	case linearWithBias:
		releaseLinear(v.Linear)
	}
}

// LoadLayer reads block i from src and checks every shape against cfg.
func LoadLayer(ctx context.Context, cfg *Config, src WeightSource, i int) (*Layer, error) {
	if i < 0 || i >= cfg.NLayer {
		return nil, fmt.Errorf("layer %d: outside [0, %d): %w", i, cfg.NLayer, ErrBadModel)
	}
	spec, ok := archSpecs[cfg.Arch]
	if !ok {
		return nil, fmt.Errorf("layer %d: architecture %q: %w", i, cfg.Arch, ErrUnsupported)
	}
	ld := &layerLoader{ctx: ctx, src: src, p: fmt.Sprintf("blk.%d.", i)}
	l := &Layer{Index: i, Kind: cfg.Kind(i)}
	e, q, kv, hd := cfg.NEmbd, cfg.QDim(), cfg.KVDim(), cfg.HeadDim
	l.AttnNorm = ld.vec("attn_norm.weight", e, true)
	l.FFNorm = ld.vec(spec.ffnNorm+".weight", e, true)
	switch l.Kind.Mixer {
	case MixerAttention, MixerGatedAttention:
		qRows, bias := q, true
		if l.Kind.Mixer == MixerGatedAttention {
			qRows, bias = 2*q, false
		}
		l.QNorm = ld.vec("attn_q_norm.weight", hd, false)
		l.KNorm = ld.vec("attn_k_norm.weight", hd, false)
		l.Q = ld.lin("attn_q", qRows, e, bias)
		l.K = ld.lin("attn_k", kv, e, bias)
		l.V = ld.lin("attn_v", kv, e, bias)
		l.O = ld.lin("attn_output", e, q, bias)
		if spec.qkNorm && ld.err == nil && (l.QNorm == nil || l.KNorm == nil) {
			ld.err = fmt.Errorf("tensors %sattn_q_norm.weight, attn_k_norm.weight: missing (%s normalizes q and k): %w", ld.p, cfg.Arch, ErrBadModel)
		}
	case MixerDeltaNet:
		s := cfg.SSM
		l.DeltaNet = &DeltaNetWeights{
			QKV:    ld.lin("attn_qkv", s.ConvDim(), e, false),
			Gate:   ld.lin("attn_gate", s.ValueDim(), e, false),
			Alpha:  ld.lin("ssm_alpha", s.VHeads, e, false),
			Beta:   ld.lin("ssm_beta", s.VHeads, e, false),
			Out:    ld.lin("ssm_out", e, s.ValueDim(), false),
			Conv:   ld.matrix("ssm_conv1d.weight", s.ConvDim(), s.ConvKernel),
			DtBias: ld.vec("ssm_dt.bias", s.VHeads, true),
			A:      ld.vec("ssm_a", s.VHeads, true),
			Norm:   ld.vec("ssm_norm.weight", s.HeadDim, true),
		}
	case MixerShortConv:
		l.ShortConv = &ShortConvWeights{
			InProj:  ld.lin("shortconv.in_proj", 3*e, e, false),
			OutProj: ld.lin("shortconv.out_proj", e, e, false),
			Conv:    ld.matrix("shortconv.conv.weight", e, cfg.ShortConvL),
		}
	}
	switch l.Kind.FFN {
	case FFNDense:
		l.Gate = ld.lin("ffn_gate", cfg.NFF, e, false)
		l.Up = ld.lin("ffn_up", cfg.NFF, e, false)
		l.Down = ld.lin("ffn_down", e, cfg.NFF, false)
	case FFNMoE:
		f := cfg.ExpertFF()
		l.Router = ld.lin("ffn_gate_inp", cfg.NExpert, e, false)
		if cfg.ExpertBias {
			l.ExpProbsBias = ld.vec("exp_probs_b.bias", cfg.NExpert, true)
		}
		l.Experts = make([]Expert, cfg.NExpert)
		for x := range l.Experts {
			l.Experts[x] = Expert{
				Gate: ld.expert("ffn_gate_exps.weight", x, f, e),
				Up:   ld.expert("ffn_up_exps.weight", x, f, e),
				Down: ld.expert("ffn_down_exps.weight", x, e, f),
			}
		}
		if cfg.NFFShared > 0 {
			l.Shared = &SharedExpert{
				Gate:    ld.lin("ffn_gate_shexp", cfg.NFFShared, e, false),
				Up:      ld.lin("ffn_up_shexp", cfg.NFFShared, e, false),
				Down:    ld.lin("ffn_down_shexp", e, cfg.NFFShared, false),
				GateInp: ld.vec("ffn_gate_inp_shexp.weight", e, true),
			}
		}
	}
	if ld.err != nil {
		return nil, ld.err
	}
	return l, nil
}

// layerLoader reads the tensors of one block; the first error sticks.
type layerLoader struct {
	ctx context.Context
	src WeightSource
	p   string // "blk.<i>."
	err error
}

// vec reads a one-dimensional tensor of n values (nil when absent and not required).
func (ld *layerLoader) vec(name string, n int, required bool) []float32 {
	if ld.err != nil {
		return nil
	}
	v, ok, err := ld.src.Vector(ld.ctx, ld.p+name)
	switch {
	case err != nil:
		ld.err = err
	case !ok && required:
		ld.err = fmt.Errorf("tensor %s%s: missing: %w", ld.p, name, ErrBadModel)
	case ok && len(v) != n:
		ld.err = fmt.Errorf("tensor %s%s: %d values, want %d: %w", ld.p, name, len(v), n, ErrBadModel)
	}
	if ld.err != nil || !ok {
		return nil
	}
	return v
}

// lin reads the matmul weight <name>.weight of n rows of k values, with <name>.bias when biasOK and
// the file has it.
func (ld *layerLoader) lin(name string, n, k int, biasOK bool) Linear {
	if ld.err != nil {
		return nil
	}
	w, ok, err := ld.src.Linear(ld.ctx, ld.p+name+".weight")
	switch {
	case err != nil:
		ld.err = err
		return nil
	case !ok:
		ld.err = fmt.Errorf("tensor %s%s.weight: missing: %w", ld.p, name, ErrBadModel)
		return nil
	}
	if gn, gk := w.Dims(); gn != n || gk != k {
		ld.err = fmt.Errorf("tensor %s%s.weight: %d rows of %d, want %d rows of %d: %w", ld.p, name, gn, gk, n, k, ErrBadModel)
		return nil
	}
	if !biasOK {
		return w
	}
	if b := ld.vec(name+".bias", n, false); b != nil {
		return linearWithBias{w, b}
	}
	return w
}

// matrix reads a two-dimensional tensor that is not a matmul weight (a convolution kernel) as rows of
// cols values (GGUF ne = [cols, rows]).
func (ld *layerLoader) matrix(name string, rows, cols int) []float32 {
	if ld.err != nil {
		return nil
	}
	idx := make([]int32, rows)
	for i := range idx {
		idx[i] = int32(i)
	}
	v := make([]float32, rows*cols)
	if err := ld.src.Rows(ld.ctx, ld.p+name, idx, v); err != nil {
		ld.err = fmt.Errorf("tensor %s%s (want %d rows of %d): %w", ld.p, name, rows, cols, err)
		return nil
	}
	return v
}

// expert reads expert x of the expert tensor named tensor (n rows of k).
func (ld *layerLoader) expert(tensor string, x, n, k int) Linear {
	if ld.err != nil {
		return nil
	}
	w, err := expertLin(ld.ctx, ld.src, ld.p+tensor, x, n, k)
	ld.err = err
	return w
}

// expertLin reads expert x of the expert tensor named tensor and checks its shape (n rows of k).
func expertLin(ctx context.Context, src WeightSource, tensor string, x, n, k int) (Linear, error) {
	name := pack.ExpertName(tensor, x)
	w, ok, err := src.Linear(ctx, name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("tensor %s (expert %d of an MoE block): missing: %w", tensor, x, ErrBadModel)
	}
	if gn, gk := w.Dims(); gn != n || gk != k {
		return nil, fmt.Errorf("%s: %d rows of %d, want %d rows of %d: %w", name, gn, gk, n, k, ErrBadModel)
	}
	return w, nil
}
