package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"orkpipe/ork/model"
	"orkpipe/ork/pack"
)

type evalFlags struct {
	model, pack, base, text string
	ctx, chunks             int
	floatActivations        bool
}

func newEvalCommand(opts *globalOptions) *cobra.Command {
	var fl evalFlags
	cmd := &cobra.Command{
		Use:   "eval --model M.gguf [--pack P.orkpack] --text T [--ctx N] [--base-model F32.gguf]",
		Short: "Perplexity (and KL divergence against a base model) computed as llama-perplexity does",
		Long: "eval tokenizes the text whole (with BOS), splits it into tokens/ctx chunks, and scores the second half\n" +
			"of each chunk, as llama.cpp's llama-perplexity does; it prints PPL +/- its error. With --base-model it\n" +
			"also prints the KL divergence of the base model's distribution to the evaluated one (mean, median,\n" +
			"99th percentile, max) and the rate of agreeing top tokens.\n\n" +
			"With --pack, every matmul weight the pack holds is taken from the pack and computed as the board does\n" +
			"(rotated activations where the entry is rotated, per-token int4/int8 activation quantization with the\n" +
			"entry's activation clip, int32 dot products, then scales: docs/orkpack.md 2.4); everything else comes\n" +
			"from --model, which is also the base model for the KL divergence unless --base-model is given.",
		Args: func(cmd *cobra.Command, args []string) error { return asUsage(cobra.NoArgs(cmd, args)) },
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEval(cmd.Context(), opts, fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.model, "model", "", "the model to evaluate (GGUF, llama family)")
	f.StringVar(&fl.pack, "pack", "", "orkpack whose weights replace --model's matmul weights, emulated exactly")
	f.StringVar(&fl.base, "base-model", "", "reference model for KL divergence (usually the F32/F16 source)")
	f.StringVar(&fl.text, "text", "", "text file to score (- for standard input)")
	f.IntVar(&fl.ctx, "ctx", 512, "chunk length in tokens")
	f.IntVar(&fl.chunks, "chunks", 0, "score at most this many chunks (0: all)")
	f.BoolVar(&fl.floatActivations, "float-activations", false,
		"feed GGUF Q4_0/Q5_0/Q8_0/F16 weights float32 inputs instead of rounding them as ggml's CPU backend does")
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
	m.Src.(*model.GGUFSource).GGMLActivations = !fl.floatActivations
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
		if target, err = model.NewModel(m.Cfg, ps); err != nil {
			return err
		}
		if fl.base == "" {
			eo.Base = m
		}
	}
	if fl.base != "" {
		b, btok, bf, err := model.OpenGGUF(ctx, fl.base, budget/2)
		if err != nil {
			return err
		}
		defer bf.Close()
		b.Src.(*model.GGUFSource).GGMLActivations = !fl.floatActivations
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
		opts.logger.Info("eval", "chunk", done, "of", total)
	}
	res, err := model.Evaluate(ctx, target, ids, eo)
	if err != nil {
		what := fl.model
		if fl.pack != "" {
			what = fl.pack + " on " + fl.model
		}
		return fmt.Errorf("eval %s on %s: %w", what, fl.text, err)
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(res)
	}
	fmt.Fprintf(opts.stdout, "PPL = %.4f +/- %.5f (%d chunks of %d, %d tokens, %d scored)\n", res.PPL, res.PPLErr, res.Chunks, fl.ctx, res.Tokens, res.Scored)
	if res.KLD != nil {
		fmt.Fprintf(opts.stdout, "KLD mean %.6f +/- %.6f  median %.6f  p99 %.6f  max %.6f\nsame top token %.3f%% +/- %.3f%%\n",
			res.KLD.Mean, res.KLD.MeanErr, res.KLD.Median, res.KLD.P99, res.KLD.Max, 100**res.SameTop, 100**res.SameTopErr)
	}
	return nil
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
