package build

import (
	"math"

	"orkpipe/ork/calib"
	"orkpipe/ork/hostspeed"
	"orkpipe/ork/model"
	"orkpipe/ork/quant"
	"orkpipe/stages"
)

// The stages' cost model: every node's engine.Node.Cost, its CPU time in nanoseconds of one core of
// the host that plans it, from the work its parameters imply. The rates below are the reference
// host's: the one of docs/performance-log.md's sessions 41-56 (two Zen 5 cores with AVX-512, pure-Go
// kernels), what its kernels reach in situ there, fitted to the 27B-width slice's builds (session
// 51's `calibrate` 100-106 s a block, the block's GPTQ nodes about 135 s of wall, `propagate` 30 s,
// on two cores; TestCostModelReference holds the model to them). Each term is divided by this host's
// speed for its kind of work (costModel, hostspeed.Speeds: the forward's products, the Hessian
// updates, GPTQ's Dgemm, the pack's integer matmul, the Go loops; GPTQ and the emulated forward blend
// two of them by the reference host's profiles), which a probe of the host measures once
// (cmd/orkpipe), so that a host without AVX-512, or with OpenBLAS, plans its first build at its own
// speed. The costs order the nodes waiting for a job slot, and estimate the nodes no earlier build of
// the target timed (progress.ETA: a node's share of the wall time is its cost times the rate the
// builds in its cache measured for its stage, or, before any, its cost over the cores; docs/cli.md,
// `orkpipe plan` and "Build events"). A model, not a measurement: a stage's change, the memory or the
// load moves it, and the measured rates take over.
const (
	// nodeStartNS is every node's fixed cost: its process, reading its inputs' headers and the source's
	// tensor index, its outputs' records (the 4369 nodes of LFM2-8B-A1B's build: 20-30 ms a node).
	nodeStartNS = 20e6
	// forwardFlopsPerNS is calibrate's forward, its products and the block's other work (the source's
	// Q8_0 decoding, norms, the softmax): session 51's perf of a 27B-width block, 12.5 TFLOP of
	// products in the ~117 of its ~201 CPU-s that were not the Hessians'.
	forwardFlopsPerNS = 105
	// propagateFlopsPerNS is propagate's forward through the finalized weights (the block's products
	// without the Hessians: 12.5 TFLOP in about 60 CPU-s).
	propagateFlopsPerNS = 200
	// hessianFlopsPerNS is the float64 Hessian updates' rate (tile8x16: 6.4 TFLOP a block in 84 CPU-s).
	hessianFlopsPerNS = 76
	// gptqFlopsPerNS is a GPTQ finalize's effective rate over its model flops, k³/3 + 2·n·k² (the
	// Cholesky factor and the column updates), with the Hessian's read, the rotation and the tail:
	// a 27B-width block's 8.3 TFLOP of them in about 135 s of two cores' wall.
	gptqFlopsPerNS = 60
	// valueNS is a pass over one weight value outside the products (decoding a source value, scoring
	// one candidate scale of round to nearest).
	valueNS = 1.2
	// weightValueNS is finalize's time a weight value besides its products and candidates: the source's
	// values read and decoded, the codes written and hashed (LFM2-8B-A1B's int8 expert slices, 1792 x
	// 2048 with 8 candidates, about 74 ms a node).
	weightValueNS = 5.0
	// tileCodeNS is a tile node's time a code: the finalized weight read and unpacked, the codes and
	// scales laid out in the board's tiles (0.27 s of the 27B ffn_down's 89 M codes on two cores; 27
	// ms an LFM2-8B-A1B expert slice).
	tileCodeNS = 4.0
	// synthByteNS is synth's time a byte of the model it writes (random values, quantized).
	synthByteNS = 30.0
	// tokenNS is the tokenizer's time a token.
	tokenNS = 2000.0
	// screenFlopsPerNS is screen's forward, the float model's and the pack's emulation.
	screenFlopsPerNS = 105
)

// costModel is the cost model on one host: the reference rates above, each term over the host's
// speed for its kind of work (the package's Target carries it: WithHostSpeeds, else the reference
// host's).
type costModel struct{ speed hostspeed.Speeds }

// gptq is the host's speed for GPTQ's model flops: 55% of the reference host's finalize was the
// Dgemm kernel's (session 51's perf of a 27B-width block's finalize: tile8x16 49%, the packed
// Dgemm's copies 5%), the rest the row phase's loops, the Hessian's read and the codes' writing.
func (m costModel) gptq() float64 { return blend(m.speed.Dgemm, 0.55, m.speed.Scalar) }

// emulated is the host's speed for the pack's emulated forward (propagate, act-clip, the pack's
// pass of screen): 55% of the reference host's propagate was the integer matmul (session 56's perf of
// a 4096-wide qwen35 block's: matMulIntPanels), the rest the float work around it (DeltaNet's steps,
// the activations' rotation and quantization, SwiGLU).
func (m costModel) emulated() float64 { return blend(m.speed.IntMatMul, 0.55, m.speed.Forward) }

// blend is the speed of work that takes share of its reference time at speed a and the rest at
// speed b.
func blend(a, share, b float64) float64 { return 1 / (share/a + (1-share)/b) }

// forwardFlops is the float work of one token through block l of c with a context of ctx tokens: every
// matmul's products (a routed expert's weights for NExpertUsed of NExpert tokens), attention over the
// causal half of the context, and a Gated DeltaNet's state updates.
func forwardFlops(c *model.Config, l, ctx int) float64 {
	var f float64
	for _, s := range c.Sites(l) {
		rows := 1.0
		if s.Experts > 0 {
			rows = float64(c.NExpertUsed)
		}
		for _, m := range s.Weights {
			f += 2 * rows * float64(m.N) * float64(s.Width)
		}
	}
	switch c.Kind(l).Mixer {
	case model.MixerAttention, model.MixerGatedAttention:
		f += 2 * float64(ctx) * float64(c.QDim()) // QKᵀ and AV over ctx/2 positions, 2 flops each
	case model.MixerDeltaNet:
		f += 6 * float64(c.SSM.ValueDim()) * float64(c.SSM.HeadDim)
	}
	return f
}

// hessianFlops is the Hessian updates of one token through block l's captured sites, those whose
// names (stages.HessianSites of the block, in site order) skip does not hold: a width² upper triangle
// of multiply-adds a site, a routed expert's for NExpertUsed of NExpert tokens.
func hessianFlops(c *model.Config, l int, names []string, skip map[string]bool) float64 {
	var f float64
	j := 0
	for _, s := range c.Sites(l) {
		if !calib.Captured(s) {
			continue
		}
		name := names[j]
		j++
		if skip[name] {
			continue
		}
		rows := 1.0
		if s.Experts > 0 {
			rows = float64(c.NExpertUsed)
		}
		f += rows * float64(s.Width) * float64(s.Width)
	}
	return f
}

// calibrate is a calibrate node's cost: its tokens through the window's blocks, forward and
// Hessians, and the decoding of the blocks' weights from the source.
func (m costModel) calibrate(p stages.CalibrateParams) int64 {
	c := p.Shape.Config()
	skip := map[string]bool{}
	for _, s := range p.Skip {
		skip[s] = true
	}
	tokens := float64(p.Sequences) * float64(p.Ctx)
	ns := nodeStartNS / m.speed.Scalar
	for l := p.Start; l < p.End; l++ {
		names := stages.HessianSites(p.Shape, l, l+1)
		ns += tokens*forwardFlops(&c, l, p.Ctx)/(forwardFlopsPerNS*m.speed.Forward) +
			tokens*hessianFlops(&c, l, names, skip)/(hessianFlopsPerNS*m.speed.Hessian) +
			float64(calib.LayerWeightBytes(&c, l))*valueNS/m.speed.Scalar
	}
	return nanos(ns)
}

// propagate is a propagate node's cost: its tokens through the window's blocks with the
// finalized weights.
func (m costModel) propagate(p stages.PropagateParams) int64 {
	c := p.Shape.Config()
	tokens := float64(p.Sequences) * float64(p.Ctx)
	ns := nodeStartNS / m.speed.Scalar
	for l := p.Start; l < p.End; l++ {
		ns += tokens*forwardFlops(&c, l, p.Ctx)/(propagateFlopsPerNS*m.emulated()) +
			float64(calib.LayerWeightBytes(&c, l))*valueNS/m.speed.Scalar
	}
	return nanos(ns)
}

// finalize is a finalize node's cost. GPTQ: the Cholesky factor of the K×K Hessian and the
// column updates of the n rows, each rotation seed's scoring (a round to nearest and n·k² of the
// error), each refit round (the Gram products and a GPTQ pass, ~3·n·k²), and quantized inputs' Hessian
// from the activation sample. Round to nearest: a pass over the weight a candidate scale.
func (m costModel) finalize(p stages.FinalizeParams) int64 {
	n, k := float64(p.N), float64(p.KP())
	grid := len(p.ClipGrid)
	if grid == 0 {
		grid = len(quant.DefaultClipGrid) // the stage's default
	}
	ns := (nodeStartNS + n*k*(weightValueNS+float64(grid)*valueNS)) / m.speed.Scalar
	if p.Method == "gptq" {
		flops := k*k*k/3 + 2*n*k*k
		flops += float64(p.RotationSeeds) * n * k * k
		flops += float64(p.ScaleRefit) * 3 * n * k * k
		if p.GPTQInputs != "" {
			flops += float64(max(1, len(p.InputClipGrid))) * float64(p.InputRows) * k * k
		}
		ns += flops / (gptqFlopsPerNS * m.gptq())
	}
	return nanos(ns)
}

// rtnTile is an rtn-tile node's: the round to nearest and the tiling, one node.
func (m costModel) rtnTile(p stages.FinalizeParams) int64 {
	return m.finalize(p) + m.tile(p.N, p.KP()) - int64(nodeStartNS/m.speed.Scalar)
}

// tile is a tile node's: the finalized weight's n·kp codes read and laid out.
func (m costModel) tile(n, kp int) int64 {
	return nanos((nodeStartNS + float64(n)*float64(kp)*tileCodeNS) / m.speed.Scalar)
}

// actClip is an act-clip node's: the sample's rows through the weight's searched channels, once
// in float and once a candidate clip.
func (m costModel) actClip(p stages.ActClipParams) int64 {
	ch := p.N
	if p.Channels > 0 {
		ch = min(ch, p.Channels)
	}
	flops := 2 * float64(p.Rows) * float64(ch) * float64(p.KP) * float64(len(p.Grid)+1)
	return nanos(nodeStartNS/m.speed.Scalar + flops/(forwardFlopsPerNS*m.emulated()))
}

// screen is a screen node's: the evaluation text's whole chunks of ctx tokens (at least one, at
// most chunks when set; the text's tokens from its size, textBytesPerToken) through the float model and the
// pack's, each with its output head, and both models' weights decoded. planTail has refused a
// screen.text that cannot be read before this runs; should its stat fail since, the node costs its
// start alone and the stage reports the file.
func (m costModel) screen(p stages.ScreenParams, text string) int64 {
	fi, err := statFile(text)
	if err != nil {
		return nanos(nodeStartNS / m.speed.Scalar)
	}
	c := p.Shape.Config()
	chunks := max(1, int(float64(fi.Size())/textBytesPerToken(c.NVocab))/max(1, p.Ctx))
	if p.Chunks > 0 {
		chunks = min(chunks, p.Chunks)
	}
	per := 2 * float64(c.NVocab) * float64(c.NEmbd)
	var weights float64
	for l := 0; l < c.NLayer; l++ {
		per += forwardFlops(&c, l, p.Ctx)
		weights += float64(stages.PackableValues(&c, l))
	}
	tokens := float64(chunks) * float64(p.Ctx)
	return nanos((nodeStartNS+2*weights*valueNS)/m.speed.Scalar + tokens*per/(screenFlopsPerNS*m.speed.Forward) +
		tokens*per/(screenFlopsPerNS*m.emulated()))
}

// textBytesPerToken is about how many bytes of English text a token of a vocabulary of vocab tokens
// takes: 1.5 at 512 (the test models' and synthetic models' 512 tokens: 3794 bytes of
// tinystories_sample.txt are 2510 tokens), rising 0.4 a doubling to 4.5 at about 100k.
func textBytesPerToken(vocab int) float64 {
	return min(4.5, max(1.5, 1.5+0.4*(math.Log2(float64(max(1, vocab)))-9)))
}

// tokenize is a tokenize node's: the calibration tokens it keeps (the corpus read to them).
func (m costModel) tokenize(p stages.TokenizeParams) int64 {
	return nanos((nodeStartNS + float64(p.Sequences)*float64(p.Ctx)*tokenNS) / m.speed.Scalar)
}

// synth is a synth node's: the bytes of the model it writes.
func (m costModel) synth(bytes int64) int64 {
	return nanos((nodeStartNS + float64(bytes)*synthByteNS) / m.speed.Scalar)
}

// maxCostNS caps a node's modeled cost: about 11.6 days of one core, far beyond any node measured (a
// 27B ffn_down's GPTQ takes about a minute, LFM2-8B-A1B's one-window calibrate about five), and low
// enough that the costs of 9000 nodes at the cap sum within int64. A parameter that models past it (a
// screen.ctx of 2e9: its attention's ctx² overflowed int64 into a negative cost the engine refused
// as an invalid graph) plans at the cap.
const maxCostNS = 1e15

// nanos is a modeled cost in nanoseconds as the engine takes it: rounded down, at most maxCostNS.
func nanos(ns float64) int64 {
	if !(ns < maxCostNS) { // NaN too
		return maxCostNS
	}
	return int64(max(ns, 0))
}
