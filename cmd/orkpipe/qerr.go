package main

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"regexp"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"orkpipe/internal/units"
	"orkpipe/ork/gguf"
	"orkpipe/ork/quant"
)

type qerrFlags struct {
	tensors   string
	seed      uint64
	calibSeed uint64
	tokens    int
	actClip   float64
}

func newQErrCommand(opts *globalOptions) *cobra.Command {
	var f qerrFlags
	cmd := &cobra.Command{
		Use:   "qerr MODEL.gguf",
		Short: "Compare quantization schemes' weight and matmul error on a model's matmul weights",
		Long: `qerr quantizes every 2-D matmul weight of MODEL.gguf (token_embd, a lookup table, is skipped)
with each scheme and prints the relative Frobenius weight error and the relative matmul error
against a float64 reference, on a deterministic spiked Gaussian activation set (1% of the
channels x10; --seed). Schemes: w4a4-pc, w4a4-g32, w4a4-g32-rot, w4a8-g32-rot,
w4a8-g32-rot-gptq (Hessian from the same activation set, or a held-out one with --calib-seed),
q4_0, q4_k, q8_0, w8a8-pc. Weights are read and evaluated one at a time; GPTQ costs O(K³) per
weight, so select a few weights of a large model with --tensors. --tokens whose activation sets, one
weight and its float64 products alone would exceed --mem is refused before anything is computed.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runQErr(cmd.Context(), opts, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.tensors, "tensors", "", "only weights whose name matches this regular expression")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the activation set and the rotation signs")
	fl.Uint64Var(&f.calibSeed, "calib-seed", 0, "calibrate GPTQ on a second spiked set with this seed (held out); 0: on the evaluation set itself")
	fl.IntVar(&f.tokens, "tokens", 512, "activation rows (tokens) per weight width")
	fl.Float64Var(&f.actClip, "act-clip", quant.DefaultActClip, "activation clip ratio for the w*a* schemes, in (0, 1]")
	return cmd
}

func runQErr(ctx context.Context, opts *globalOptions, path string, f qerrFlags) error {
	var re *regexp.Regexp
	if f.tensors != "" {
		var err error
		if re, err = regexp.Compile(f.tensors); err != nil {
			return usagef("--tensors: %v", err)
		}
	}
	if f.tokens < 1 {
		return usagef("--tokens: must be at least 1, got %d", f.tokens)
	}
	if !(f.actClip > 0 && f.actClip <= 1) {
		return usagef("--act-clip: must be in (0, 1], got %v", f.actClip)
	}
	file, err := gguf.Open(ctx, path)
	if err != nil {
		return err
	}
	defer file.Close()
	if err := checkQErrMemory(opts, file, re, f); err != nil {
		return err
	}
	cfg := quant.EvalConfig{ActClip: f.actClip, Workers: opts.jobs, Seed: f.seed}
	var calib quant.ActivationSource
	if f.calibSeed != 0 {
		if f.calibSeed == f.seed {
			return usagef("--calib-seed %d equals --seed: a held-out set needs another seed", f.calibSeed)
		}
		calib = quant.SpikedSource(f.tokens, f.calibSeed)
	}
	rep, err := quant.EvaluateAll(ctx, matmulWeights(ctx, file, re), quant.SpikedSource(f.tokens, f.seed), calib, cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if opts.json {
		return json.NewEncoder(opts.stdout).Encode(rep)
	}
	return printQErr(opts, path, f, rep)
}

// checkQErrMemory refuses --tokens whose activation sets, one weight and its float64 reference products
// alone exceed --mem, at the weight where they are largest: the run keeps one set of tokens x K
// float32 per distinct width K it has met (two with --calib-seed) and holds a weight, N x K float32,
// and its reference products, tokens x N float64, while it evaluates it. A lower bound of what the
// run holds, so a run that could fit is never refused (--tokens 2e9 on stories260K ran out of memory,
// and so did an 8 GiB F32 weight under --mem 2GiB).
func checkQErrMemory(opts *globalOptions, file *gguf.File, re *regexp.Regexp, f qerrFlags) error {
	budget, err := opts.memBudget()
	if err != nil {
		return err
	}
	sets := 1.0
	if f.calibSeed != 0 {
		sets = 2
	}
	tokens := float64(f.tokens)
	widths := map[int64]bool{}
	var sumK int64
	need, at := 0.0, ""
	for _, ti := range file.Tensors {
		if !qerrSelects(ti, re) {
			continue
		}
		if k := ti.RowLen(); !widths[k] {
			widths[k] = true
			sumK += k
		}
		weight := float64(ti.Rows()) * float64(ti.RowLen()) * 4
		if n := tokens*float64(sumK)*4*sets + weight + tokens*float64(ti.Rows())*8; n > need {
			need, at = n, fmt.Sprintf("at %s: %d tokens x %d values of the %d width(s) met, float32, %g set(s), the weight, %d x %d float32, and its products, %d x %d float64",
				ti.Name, f.tokens, sumK, len(widths), sets, ti.Rows(), ti.RowLen(), f.tokens, ti.Rows())
		}
	}
	if need > float64(budget) {
		return usagef("--tokens %d: the activation sets, one weight and its reference products alone take %s (%s), above --mem %s: fewer tokens, or --tensors",
			f.tokens, units.FormatSize(int64(min(need, 1<<62))), at, units.FormatSize(budget))
	}
	return nil
}

// qerrSelects reports whether qerr evaluates tensor ti: a 2-D weight other than token_embd (a
// lookup table) that re, when set, matches.
func qerrSelects(ti gguf.TensorInfo, re *regexp.Regexp) bool {
	return len(ti.Shape) == 2 && ti.Name != "token_embd.weight" && (re == nil || re.MatchString(ti.Name))
}

// matmulWeights yields the 2-D weights of file (except token_embd) matching re, one at a time.
func matmulWeights(ctx context.Context, file *gguf.File, re *regexp.Regexp) iter.Seq2[quant.Matrix, error] {
	return func(yield func(quant.Matrix, error) bool) {
		for _, ti := range file.Tensors {
			if !qerrSelects(ti, re) {
				continue
			}
			m := quant.Matrix{Name: ti.Name, Rows: int(ti.Rows()), Cols: int(ti.RowLen())}
			m.Data = make([]float32, m.Rows*m.Cols)
			if err := file.ReadRows(ctx, ti, 0, m.Data); err != nil {
				yield(quant.Matrix{}, fmt.Errorf("%s: %w", ti.Name, err))
				return
			}
			if !yield(m, nil) {
				return
			}
		}
	}
}

func printQErr(opts *globalOptions, path string, f qerrFlags, rep *quant.Report) error {
	calib := "the same set (in-sample)"
	if f.calibSeed != 0 {
		calib = fmt.Sprintf("a held-out set (seed %d)", f.calibSeed)
	}
	fmt.Fprintf(opts.stdout, "%s: %d weights, %d spiked tokens (seed %d), activation clip %g, GPTQ calibrated on %s\n\nmatmul relative error per tensor:\n",
		path, len(rep.Tensors), f.tokens, f.seed, f.actClip, calib)
	tw := tabwriter.NewWriter(opts.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "tensor\tN\tK\t")
	for _, s := range rep.Schemes {
		fmt.Fprintf(tw, "%s\t", s.Scheme)
	}
	fmt.Fprintln(tw)
	for _, t := range rep.Tensors {
		fmt.Fprintf(tw, "%s\t%d\t%d\t", t.Name, t.N, t.K)
		for _, s := range t.Schemes {
			fmt.Fprintf(tw, "%.5f\t", s.MatmulRelErr)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var q40 float64
	for _, s := range rep.Schemes {
		if s.Scheme == quant.SchemeQ4_0 {
			q40 = s.MatmulRelErr
		}
	}
	fmt.Fprintf(opts.stdout, "\nmean over %d weights:\n", len(rep.Tensors))
	tw = tabwriter.NewWriter(opts.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scheme\tweight_rel_err\tmatmul_rel_err\tx q4_0\t")
	for _, s := range rep.Schemes {
		ratio := "-"
		if q40 > 0 {
			ratio = fmt.Sprintf("%.2f", s.MatmulRelErr/q40)
		}
		fmt.Fprintf(tw, "%s\t%.5f\t%.5f\t%s\t\n", s.Scheme, s.WeightRelErr, s.MatmulRelErr, ratio)
	}
	return tw.Flush()
}
