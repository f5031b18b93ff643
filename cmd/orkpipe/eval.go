package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"orkpipe/ork/model"
	"orkpipe/ork/pack"
)

type evalFlags struct {
	model, pack, base, klBase, text string
	ctx, chunks                     int
	ctxSet                          bool // --ctx given (else the default, or --kl-base's n_ctx)
	floatActivations, kvF16, ggml   bool
}

func newEvalCommand(opts *globalOptions) *cobra.Command {
	var fl evalFlags
	cmd := &cobra.Command{
		Use:   "eval --model M.gguf [--pack P.orkpack] --text T [--ctx N] [--base-model F32.gguf | --kl-base FILE]",
		Short: "Perplexity (and KL divergence against a base model) computed as llama-perplexity does",
		Long: "eval tokenizes the text whole (with BOS), splits it into tokens/ctx chunks, and scores the second half\n" +
			"of each chunk, as llama.cpp's llama-perplexity does; it prints PPL +/- its error. With --base-model it\n" +
			"also prints the KL divergence of the base model's distribution to the evaluated one (mean, median,\n" +
			"99th percentile, max) and the rate of agreeing top tokens.\n\n" +
			"With --kl-base FILE, the base distribution is the logits file llama-perplexity --kl-divergence-base FILE\n" +
			"wrote (for instance on a bigger machine, from the float model): the file must have been made from the\n" +
			"same text with the same tokenizer and vocabulary, its n_ctx is the chunk length (--ctx must agree), and\n" +
			"eval prints the statistics llama-perplexity --kl-divergence prints (perplexities, KL divergence\n" +
			"percentiles, token probability differences, same top token).\n\n" +
			"With --pack, every matmul weight the pack holds is taken from the pack and computed as the board does\n" +
			"(rotated activations where the entry is rotated, per-token int4/int8 activation quantization with the\n" +
			"entry's activation clip, int32 dot products, then scales: docs/orkpack.md 2.4); everything else comes\n" +
			"from --model, which is also the base model for the KL divergence unless --base-model or --kl-base is\n" +
			"given.\n\n" +
			"Attention keys and values are float32 (llama-perplexity -ctk f32 -ctv f32); --kv-f16 rounds them to\n" +
			"binary16 as llama.cpp's default F16 K/V cache does. --ggml computes every operation as llama.cpp's CPU\n" +
			"backend does in llama-perplexity's default run (F16 K/V cache read by its flash-attention kernel, ggml's\n" +
			"matrix products with their input rounding and summation order, its norms, SiLU, RoPE, convolution,\n" +
			"Gated DeltaNet and MoE kernels, and llama-perplexity's batching of chunks), so that the figures equal\n" +
			"llama-perplexity's default ones (Q8_0, F16 and F32 weights; the AVX2/FMA build of the reference\n" +
			"llama.cpp). It is slower than the default float32 pass.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl.ctxSet = cmd.Flags().Changed("ctx")
			return runEval(cmd.Context(), opts, fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.model, "model", "", "the model to evaluate (GGUF: llama, mistral, qwen2, qwen3, qwen35, qwen35moe, lfm2, lfm2moe)")
	f.StringVar(&fl.pack, "pack", "", "orkpack whose weights replace --model's matmul weights, emulated exactly")
	f.StringVar(&fl.base, "base-model", "", "reference model for KL divergence (usually the F32/F16 source)")
	f.StringVar(&fl.klBase, "kl-base", "", "reference logits for KL divergence: a file written by llama-perplexity --kl-divergence-base")
	f.StringVar(&fl.text, "text", "", "text file to score (- for standard input)")
	f.IntVar(&fl.ctx, "ctx", 512, "chunk length in tokens (with --kl-base: the file's n_ctx)")
	f.IntVar(&fl.chunks, "chunks", 0, "score at most this many chunks (0: all)")
	f.BoolVar(&fl.floatActivations, "float-activations", false,
		"feed GGUF Q4_0/Q5_0/Q8_0/F16 weights float32 inputs instead of rounding them as ggml's CPU backend does")
	f.BoolVar(&fl.kvF16, "kv-f16", false, "round attention keys and values to binary16, as llama.cpp's default F16 K/V cache")
	f.BoolVar(&fl.ggml, "ggml", false, "compute as llama.cpp's CPU backend does by default (flash attention with F16 K/V, ggml's kernels and rounding)")
	return cmd
}

func runEval(ctx context.Context, opts *globalOptions, fl evalFlags) error {
	switch {
	case fl.model == "":
		return usagef("eval: --model is required")
	case fl.text == "":
		return usagef("eval: --text is required")
	case fl.ctx < 4:
		return usagef("eval: --ctx %d: want at least 4", fl.ctx)
	case fl.chunks < 0:
		return usagef("eval: --chunks %d: want >= 0", fl.chunks)
	case fl.base != "" && fl.klBase != "":
		return usagef("eval: --base-model and --kl-base both give a base distribution: use one")
	case fl.ggml && fl.floatActivations:
		return usagef("eval: --ggml rounds activations as ggml does: it cannot be combined with --float-activations")
	}
	var klBase *model.KLBase
	if fl.klBase != "" {
		b, err := model.OpenKLBase(fl.klBase)
		if err != nil {
			return err
		}
		defer b.Close()
		if fl.ctxSet && fl.ctx != b.Ctx {
			return usagef("eval: --ctx %d, but --kl-base %s was written with n_ctx %d", fl.ctx, fl.klBase, b.Ctx)
		}
		fl.ctx, klBase = b.Ctx, b
	}
	budget, err := opts.memBudget()
	if err != nil {
		return err
	}
	text, err := readText(fl.text)
	if err != nil {
		return err
	}
	m, tok, f, err := model.OpenGGUF(ctx, fl.model, budget/2)
	if err != nil {
		return err
	}
	defer f.Close()
	setNumerics(m, fl)
	ids, err := tok.Encode(text, true, false)
	if err != nil {
		return fmt.Errorf("tokenize %s: %w", fl.text, err)
	}
	eo := model.EvalOptions{Ctx: fl.ctx, MaxChunks: fl.chunks, BOS: model.NoToken}
	if tok.Vocab().AddBOS {
		eo.BOS = tok.Vocab().BOS
	}
	target := m
	if fl.pack != "" {
		p, err := pack.Open(ctx, fl.pack)
		if err != nil {
			return err
		}
		defer p.Close()
		src, ok := m.Src.(*model.GGUFSource)
		if !ok {
			return fmt.Errorf("eval: --model %s: no GGUF weight source", fl.model)
		}
		ps, err := model.NewPackSource(src, p)
		if err != nil {
			return fmt.Errorf("eval: --pack %s with --model %s: %w", fl.pack, fl.model, err)
		}
		models := 2 // the models each chunk runs through: the pack's and the float one (--base, or --model)
		if klBase != nil {
			models = 1 // --kl-base: logits read from the file
		}
		// An expert's Apply takes the tokens of up to the chunks evaluated (len(ids)/ctx bounds
		// --kl-base's too: its chunks are the text's).
		if err := ps.CheckEmulationMemory(fl.ctx, m.Cfg.EvalExpertTokens(fl.ctx, models, model.EvalChunks(len(ids), fl.ctx, fl.chunks)), budget); err != nil {
			return fmt.Errorf("eval: --pack %s with --ctx %d and --mem %d: %w", fl.pack, fl.ctx, budget, err)
		}
		if target, err = model.NewModel(m.Cfg, ps); err != nil {
			return err
		}
		target.KVF16, target.GGMLExact = fl.kvF16, fl.ggml
		if fl.base == "" && klBase == nil {
			eo.Base = m
		}
	}
	if fl.base != "" {
		b, btok, bf, err := model.OpenGGUF(ctx, fl.base, budget/2)
		if err != nil {
			return err
		}
		defer bf.Close()
		setNumerics(b, fl)
		bids, err := btok.Encode(text, true, false)
		if err != nil {
			return fmt.Errorf("tokenize %s with %s: %w", fl.text, fl.base, err)
		}
		if !sameIDs(ids, bids) {
			return fmt.Errorf("--base-model %s tokenizes %s differently from --model %s: the KL divergence would compare different tokens", fl.base, fl.text, fl.model)
		}
		eo.Base = b
	}
	eo.Progress = func(done, total int) {
		opts.logger.Info("eval", "step", done, "of", total)
	}
	what := fl.model
	if fl.pack != "" {
		what = fl.pack + " on " + fl.model
	}
	if klBase != nil {
		r, err := model.EvaluateKLBase(ctx, target, klBase, ids, eo.BOS, fl.chunks, eo.Progress)
		if err != nil {
			return fmt.Errorf("eval %s on %s against %s: %w", what, fl.text, fl.klBase, err)
		}
		if opts.json {
			return json.NewEncoder(opts.stdout).Encode(r)
		}
		writeKLReport(opts.stdout, r)
		return nil
	}
	res, err := model.Evaluate(ctx, target, ids, eo)
	if err != nil {
		return fmt.Errorf("eval %s on %s: %w", what, fl.text, err)
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(res)
	}
	fmt.Fprintf(opts.stdout, "PPL = %.4f +/- %.5f (%d chunks of %d, %d tokens, %d scored)\n", res.PPL, res.PPLErr, res.Chunks, fl.ctx, res.Tokens, res.Scored)
	if res.KLD != nil {
		base := fl.base
		if base == "" { // --pack without --base-model: the pack's float model is the base
			base = fl.model
		}
		fmt.Fprintf(opts.stdout, "base PPL = %.4f +/- %.5f (%s, the same chunks)\n", res.BasePPL, res.BasePPLErr, base)
		fmt.Fprintf(opts.stdout, "KLD mean %.6f +/- %.6f  median %.6f  p99 %.6f  max %.6f\nsame top token %.3f%% +/- %.3f%%\n",
			res.KLD.Mean, res.KLD.MeanErr, res.KLD.Median, res.KLD.P99, res.KLD.Max, 100**res.SameTop, 100**res.SameTopErr)
	}
	return nil
}

// setNumerics applies the rounding flags to a model opened from a GGUF file, and makes its source
// hold the quantized and 16-bit matmul weights in their file encoding, mapped from the file (as the
// screen stage does; --ggml's exact weights take precedence): each chunk runs every layer again, and a
// model bigger than the float cache (a 27B's layers) is then read from the page cache in place instead
// of being dequantized into fresh float32 copies (twice an F16 weight's bytes, about four times a
// Q8_0's, seven times a Q4_0's) for every chunk. The figures do not change: an Encoded weight's
// products are the Dense one's, bit for bit in the pure-Go build and to float32 rounding under
// -tags blas (model.Encoded; TestEncodedForwardBitIdentical).
func setNumerics(m *model.Model, fl evalFlags) {
	src := m.Src.(*model.GGUFSource)
	src.GGMLActivations = !fl.floatActivations
	src.GGMLExact = fl.ggml
	src.KeepEncoded, src.MapEncoded = true, true
	m.KVF16, m.GGMLExact = fl.kvF16, fl.ggml
}

// writeKLReport prints r in the layout of llama-perplexity --kl-divergence's final statistics.
func writeKLReport(w io.Writer, r *model.KLReport) {
	fmt.Fprintf(w, "%d chunks of %d tokens, %d scored\n\n", r.Chunks, r.Ctx, r.Scored)
	fmt.Fprintf(w, "====== Perplexity statistics ======\n")
	fmt.Fprintf(w, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", r.PPL, r.PPLErr)
	fmt.Fprintf(w, "Mean PPL(base)                : %10.6f ± %10.6f\n", r.PPLBase, r.PPLBaseErr)
	fmt.Fprintf(w, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100*r.LnPPLCor)
	fmt.Fprintf(w, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", r.LnPPLRatio, r.LnPPLRatioErr)
	fmt.Fprintf(w, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", r.PPLRatio, r.PPLRatioErr)
	fmt.Fprintf(w, "Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n\n", r.PPLDiff, r.PPLDiffErr)
	k := &r.KLD
	fmt.Fprintf(w, "====== KL divergence statistics ======\n")
	fmt.Fprintf(w, "Mean    KLD: %10.6f ± %10.6f\n", k.Mean, k.MeanErr)
	for _, p := range []struct {
		name string
		v    float64
	}{{"Maximum", k.Max}, {"99.9%  ", k.P999}, {"99.0%  ", k.P99}, {"95.0%  ", k.P95}, {"90.0%  ", k.P90}, {"Median ", k.Median},
		{"10.0%  ", k.P10}, {" 5.0%  ", k.P5}, {" 1.0%  ", k.P1}, {" 0.1%  ", k.P01}, {"Minimum", k.Min}} {
		fmt.Fprintf(w, "%s KLD: %10.6f\n", p.name, p.v)
	}
	d := &r.DeltaP
	fmt.Fprintf(w, "\n====== Token probability statistics ======\n")
	fmt.Fprintf(w, "Mean    Δp: %6.3f ± %5.3f %%\n", 100*d.Mean, 100*d.MeanErr)
	for _, p := range []struct {
		name string
		v    float64
	}{{"Maximum", d.Max}, {"99.9%  ", d.P999}, {"99.0%  ", d.P99}, {"95.0%  ", d.P95}, {"90.0%  ", d.P90}, {"75.0%  ", d.P75},
		{"Median ", d.Median}, {"25.0%  ", d.P25}, {"10.0%  ", d.P10}, {" 5.0%  ", d.P5}, {" 1.0%  ", d.P1}, {" 0.1%  ", d.P01}, {"Minimum", d.Min}} {
		fmt.Fprintf(w, "%s Δp: %6.3f%%\n", p.name, 100*p.v)
	}
	fmt.Fprintf(w, "RMS Δp    : %6.3f ± %5.3f %%\n", 100*r.DeltaPRMS, 100*r.DeltaPRMSEr)
	fmt.Fprintf(w, "Same top p: %6.3f ± %5.3f %%\n", 100*r.SameTop, 100*r.SameTopErr)
}

func sameIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
