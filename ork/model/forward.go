package model

import (
	"context"
	"fmt"
	"math"
)

// Input is the position of a linear input site of a block in [Config.Sites] of its layer (see
// InputQKV for the positions every layer kind shares).
type Input int

// String returns the name of the input in a llama block (attention and a dense FFN).
//
// Deprecated: names depend on the layer kind; use Config.Sites(layer)[in].Name.
func (in Input) String() string {
	switch in {
	case InputQKV:
		return "attn_qkv"
	case InputAttnO:
		return "attn_output"
	case InputGateUp:
		return "ffn_gate_up"
	case InputDown:
		return "ffn_down"
	}
	return fmt.Sprintf("Input(%d)", int(in))
}

// Weights lists the weight names (within a block) that read an input of a llama block with a dense FFN.
//
// Deprecated: use Config.Sites(layer)[in].Weights.
func (in Input) Weights() []string {
	switch in {
	case InputQKV:
		return []string{"attn_q", "attn_k", "attn_v"}
	case InputAttnO:
		return []string{"attn_output"}
	case InputGateUp:
		return []string{"ffn_gate", "ffn_up"}
	case InputDown:
		return []string{"ffn_down"}
	}
	return nil
}

// Width returns the number of values per token of an input of a llama block.
//
// Deprecated: use Config.Sites(layer)[in].Width.
func (in Input) Width(c *Config) int {
	switch in {
	case InputAttnO:
		return c.QDim()
	case InputDown:
		return c.NFF
	}
	return c.NEmbd
}

// Observer sees every linear input site of a block as it is computed: Observe(layer, in, x) with in a
// position in Config.Sites(layer) of a site that is not per expert, and x its rows: one per token of
// the batch (all sequences, in order), Sites(layer)[in].Width values each. Per-expert sites are seen
// only by an [ExpertObserver]. Observe is called once per site and batch; it must not retain x.
type Observer interface {
	Observe(layer int, in Input, x []float32)
}

// Model runs a network of a supported architecture. It is safe for one goroutine at a time.
type Model struct {
	Cfg Config
	Src WeightSource
	// KVF16 rounds attention keys (after RoPE) and values to binary16 before attention, as
	// llama.cpp's default F16 K/V cache stores them; false keeps them float32 (llama.cpp's -ctk f32
	// -ctv f32).
	KVF16 bool
	// GGMLExact computes every operation as llama.cpp's CPU backend does by default (the reference
	// build of ../shared/testdata/SOURCES.md: AVX2 + FMA + F16C), operation for operation, so that a
	// quantized model scores what llama-perplexity scores: the F16 K/V cache read by the tiled
	// flash-attention kernel (flashAttentionGGML; implies KVF16), ggml's RMS norm, SiLU with its
	// vectorized exponential, RoPE with the FMAs the compiler made, the Gated DeltaNet and short
	// convolution kernels, and the MoE routing and expert sums in ggml's order. Matrix products are
	// exact only with a source whose Linears are ggml-exact (GGUFSource.GGMLExact). Values that
	// go through the C library (expf, logf, sincosf) are the correctly rounded ones, which differ from
	// glibc's in the last bit for about 0.1-1.5% of the arguments.
	GGMLExact bool
	// GGMLUbatch is, with GGMLExact, the number of tokens of each sequence in each of llama.cpp's
	// ubatches (the last one of a sequence may be shorter; 0: a whole sequence in one): ggml's
	// flash-attention kernel rounds differently for a ubatch of fewer than 64 rows per sequence
	// (flashAttentionGGML). Evaluate sets it per chunk as llama-perplexity batches (perplexityUbatch).
	GGMLUbatch int

	buf   scratch // reused between RunLayer calls
	group scratch // runMoESeqs' buffers for the rows of several sequences
	// testMoESeqs, when positive, replaces moeSeqs (tests: the sequences runMoESeqs takes at once).
	testMoESeqs int
	rope        *ropeTable // the RoPE table of the last sequence length, reused while it does not change
}

// NewModel validates cfg and returns a model reading its weights from src.
func NewModel(cfg Config, src WeightSource) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Model{Cfg: cfg, Src: src}, nil
}

// Embed returns the token embeddings of tokens (len(tokens) rows of NEmbd values).
func (m *Model) Embed(ctx context.Context, tokens []int32) ([]float32, error) {
	for i, t := range tokens {
		if t < 0 || int(t) >= m.Cfg.NVocab {
			return nil, fmt.Errorf("token %d at position %d: outside the vocabulary of %d: %w", t, i, m.Cfg.NVocab, ErrBadModel)
		}
	}
	e := m.Cfg.NEmbd
	h := make([]float32, len(tokens)*e)
	if err := m.Src.Rows(ctx, "token_embd.weight", tokens, h); err != nil {
		return nil, err
	}
	if i := firstNonFinite(h); i >= 0 {
		return nil, fmt.Errorf("tensor token_embd.weight: row %d (the token at position %d) holds %v at column %d: %w",
			tokens[i/e], i/e, h[i], i%e, ErrNotFinite)
	}
	return h, nil
}

// Forward runs tokens (one sequence starting at position 0) through every layer and returns the logits,
// len(tokens) rows of NVocab values. Each layer is loaded, run and released (Layer.Release: a
// GGUFSource with MapEncoded unmaps its weights) before the next is loaded.
func (m *Model) Forward(ctx context.Context, tokens []int32) ([]float32, error) {
	return m.ForwardObserved(ctx, tokens, nil)
}

// ForwardObserved is Forward with obs (nil: none) seeing every block's linear inputs and, as a
// [RouteObserver], every MoE block's routing, as RunLayer shows them.
func (m *Model) ForwardObserved(ctx context.Context, tokens []int32, obs Observer) ([]float32, error) {
	h, err := m.Embed(ctx, tokens)
	if err != nil {
		return nil, err
	}
	for i := 0; i < m.Cfg.NLayer; i++ {
		l, err := LoadLayer(ctx, &m.Cfg, m.Src, i)
		if err != nil {
			return nil, err
		}
		err = m.RunLayer(ctx, l, h, obs)
		l.Release()
		if err != nil {
			return nil, err
		}
	}
	return m.Logits(ctx, h)
}

// Logits applies the final norm (output_norm; token_embd_norm in LFM2) and the output projection
// (token_embd when output.weight is absent, i.e. tied embeddings) to hidden states h.
func (m *Model) Logits(ctx context.Context, h []float32) ([]float32, error) {
	e := m.Cfg.NEmbd
	normName := "output_norm.weight"
	if spec, ok := archSpecs[m.Cfg.Arch]; ok {
		normName = spec.outputNorm + ".weight"
	}
	norm, ok, err := m.Src.Vector(ctx, normName)
	if err != nil {
		return nil, err
	}
	if !ok || len(norm) != e {
		return nil, fmt.Errorf("tensor %s: missing or not %d values: %w", normName, e, ErrBadModel)
	}
	out, ok, err := m.Src.Linear(ctx, "output.weight")
	if err != nil {
		return nil, err
	}
	name := "output.weight"
	if !ok {
		name = "token_embd.weight"
		if out, ok, err = m.Src.Linear(ctx, name); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("tensors output.weight and token_embd.weight: both missing: %w", ErrBadModel)
		}
	}
	defer releaseLinear(out) // a mapping of the file under a GGUFSource with MapEncoded
	if n, k := out.Dims(); n != m.Cfg.NVocab || k != e {
		return nil, fmt.Errorf("tensor %s: %d rows of %d, want %d of %d: %w", name, n, k, m.Cfg.NVocab, e, ErrBadModel)
	}
	t := len(h) / e
	x := make([]float32, len(h))
	m.norm(x, h, norm, e)
	logits := make([]float32, t*m.Cfg.NVocab)
	if err := out.Apply(logits, x); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if i := firstNonFinite(logits); i >= 0 {
		return nil, m.notFinite(ctx, "the logits", logits, i, m.Cfg.NVocab, "vocabulary entry", tokenAt(i/m.Cfg.NVocab, 0),
			func(n string) bool { return n == normName || n == name })
	}
	return logits, nil
}

// RunLayer applies block l to the hidden states h (one sequence: T rows of NEmbd values, positions
// 0..T-1) in place: RunLayerBatch with one sequence.
func (m *Model) RunLayer(ctx context.Context, l *Layer, h []float32, obs Observer) error {
	e := m.Cfg.NEmbd
	if len(h) == 0 || len(h)%e != 0 {
		return fmt.Errorf("layer %d: hidden states of %d values are not rows of %d: %w", l.Index, len(h), e, ErrBadModel)
	}
	return m.RunLayerBatch(ctx, l, h, len(h)/e, obs)
}

// RunLayerBatch applies block l in place to the hidden states h of S sequences of seqLen tokens each
// (S·seqLen rows of NEmbd values, sequence after sequence):
//
//	h += mixer(rms(h)·attn_norm);  h += FFN(rms(h)·ffn_norm)
//
// Every matmul weight is applied once to all S·seqLen rows; attention, convolutions and recurrences
// run per sequence, each sequence at positions 0..seqLen-1 with zero convolution and recurrent state at
// its start, seeing only itself. The result for a sequence is that of RunLayer on it alone, up to the
// float32 rounding of the matrix products (gonum's Sgemm blocks differently for different row counts).
// obs, when not nil, sees each site once per call with all S·seqLen rows (an ExpertObserver also the
// routed rows per expert).
func (m *Model) RunLayerBatch(ctx context.Context, l *Layer, h []float32, seqLen int, obs Observer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &m.Cfg
	e := c.NEmbd
	if seqLen <= 0 || len(h) == 0 || len(h)%(seqLen*e) != 0 {
		return fmt.Errorf("layer %d: hidden states of %d values are not sequences of %d rows of %d: %w", l.Index, len(h), seqLen, e, ErrBadModel)
	}
	if l.Kind != c.Kind(l.Index) {
		return fmt.Errorf("layer %d: loaded as %+v, the model config says %+v: %w", l.Index, l.Kind, c.Kind(l.Index), ErrBadModel)
	}
	rows := len(h) / e
	s := m.buf.get(c, l.Kind, rows, seqLen)
	x, err := m.mixerHalf(l, h, seqLen, s, obs)
	if err != nil {
		return err
	}
	switch l.Kind.FFN {
	case FFNDense:
		if obs != nil {
			obs.Observe(l.Index, InputGateUp, x)
		}
		err = swiGLU(l.Index, denseFFN, l.Gate, l.Up, l.Down, x, x, s.buf(sGate, rows*c.NFF), s.buf(sUp, rows*c.NFF), obs, InputDown, m.GGMLExact)
	case FFNMoE:
		if obs != nil {
			obs.Observe(l.Index, InputRouter, x)
		}
		out := s.buf(sMoEOut, rows*e)
		if err = m.runMoE(l, x, out, s, obs, 0); err == nil {
			copy(x, out)
		}
	}
	if err != nil {
		return err
	}
	for i := range h {
		h[i] += x[i]
	}
	if i := firstNonFinite(h); i >= 0 {
		return m.notFinite(ctx, fmt.Sprintf("the output of blk.%d", l.Index), h, i, e, "channel", tokenAt(i/e, seqLen), blockTensors(l.Index))
	}
	return nil
}

// mixerHalf runs the first half of block l on the hidden states h (sequences of seqLen rows) in place,
// h += mixer(rms(h)·attn_norm), and returns the FFN's input rms(h)·ffn_norm (scratch sX of s, which
// holds rows = len(h)/NEmbd rows of block l's kind).
func (m *Model) mixerHalf(l *Layer, h []float32, seqLen int, s *scratch, obs Observer) ([]float32, error) {
	e := m.Cfg.NEmbd
	x := s.buf(sX, len(h))
	m.norm(x, h, l.AttnNorm, e)
	if obs != nil {
		obs.Observe(l.Index, InputQKV, x)
	}
	var err error
	switch l.Kind.Mixer {
	case MixerAttention:
		err = m.attentionBlock(l, x, seqLen, s, obs)
	case MixerGatedAttention:
		err = m.gatedAttention(l, x, seqLen, s, obs)
	case MixerDeltaNet:
		err = m.deltaNet(l, x, seqLen, s, obs)
	case MixerShortConv:
		err = m.shortConv(l, x, seqLen, s, obs)
	default:
		err = fmt.Errorf("layer %d: mixer %s: %w", l.Index, l.Kind.Mixer, ErrUnsupported)
	}
	if err != nil {
		return nil, err
	}
	for i := range h {
		h[i] += x[i]
	}
	m.norm(x, h, l.FFNorm, e)
	return x, nil
}

// The names of the weights of a dense FFN and of a shared expert, for errors.
var (
	denseFFN  = [3]string{"ffn_gate", "ffn_up", "ffn_down"}
	sharedFFN = [3]string{"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"}
)

// swiGLU computes y = down(silu(gate·x) ⊙ up·x) for the rows of x into y (which may be x), with g and u
// (rows × the FFN width) as scratch; obs, when not nil, sees silu(gate)·up as site in. names are the
// three weights' names (for errors). ggml selects ggml's SiLU (swigluRow).
func swiGLU(layer int, names [3]string, gate, up, down Linear, y, x, g, u []float32, obs Observer, in Input, ggml bool) error {
	if err := gate.Apply(g, x); err != nil {
		return fmt.Errorf("blk.%d.%s: %w", layer, names[0], err)
	}
	if err := up.Apply(u, x); err != nil {
		return fmt.Errorf("blk.%d.%s: %w", layer, names[1], err)
	}
	f, _ := gate.Dims()
	parallelRows(len(g)/f, 8*len(g), 0, func(r0, r1 int) { // each value alone: the same on any goroutine
		if ggml {
			for r := r0 * f; r < r1*f; r += f {
				swigluRow(g[r:r+f], g[r:r+f], u[r:r+f])
			}
			return
		}
		for i := r0 * f; i < r1*f; i++ {
			g[i] = g[i] / (1 + float32(math.Exp(float64(-g[i])))) * u[i]
		}
	})
	if obs != nil {
		obs.Observe(layer, in, g)
	}
	if err := down.Apply(y, g); err != nil {
		return fmt.Errorf("blk.%d.%s: %w", layer, names[2], err)
	}
	return nil
}

// norm is the forward pass's RMS norm (rmsNormGGML with GGMLExact, else rmsNorm) with eps NormEps.
func (m *Model) norm(dst, src, w []float32, n int) {
	if m.GGMLExact {
		rmsNormGGML(dst, src, w, n, m.Cfg.NormEps)
		return
	}
	rmsNorm(dst, src, w, n, m.Cfg.NormEps)
}

// rmsNorm normalises every row of n values of src into dst (which may be src) and scales by w, as
// ggml_rms_norm: sum of squares in float64, scale = 1/sqrt(mean + eps).
func rmsNorm(dst, src, w []float32, n int, eps float32) {
	for r := 0; r+n <= len(src); r += n {
		row := src[r : r+n]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		mean := float32(ss / float64(n))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		out := dst[r : r+n]
		for i, v := range row {
			out[i] = v * scale * w[i]
		}
	}
}
