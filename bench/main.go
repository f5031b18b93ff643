// Command bench is orkpipe's benchmark harness (issue #10): it builds the orkpipe binary, drives
// the CLI (and library calls where the CLI has no entry point) against the tools a release
// engineer would otherwise use, and reports every figure as a median over -runs interleaved runs
// with its spread and its ratio to a baseline measured in the same run.
//
//	go run ./bench -profile quick             # ~10 minutes on 2 cores
//	go run ./bench -profile full -only noop   # one row
//
// It writes the results as JSON (-json) and as the markdown table between the bench markers of
// docs/performance.md (-md). Tools it compares with come from Debian (b3sum, coreutils); a missing
// one skips only its measurement, marked "skipped: <why>" with the apt-get line that installs it.
// Scratch files live under -dir (default a temporary directory) and are removed at the end.
package main

import (
	"orkpipe/internal/blascore"

	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"orkpipe/internal/units"
)

// rowSpec is one selectable row: id for -only/-skip, and whether the quick profile runs it.
type rowSpec struct {
	id    string
	quick bool
	run   func(e *env) ([]Row, error)
	long  string // why a full-profile row is long, shown when it is skipped
}

func one(f func(e *env) (Row, error)) func(e *env) ([]Row, error) {
	return func(e *env) ([]Row, error) {
		r, err := f(e)
		return []Row{r}, err
	}
}

func specs(profile string, scaleLayers []int, rssBudgets []int64) []rowSpec {
	const rtnLayers = 2 // the slice: 660M params, every matmul weight I4_NATIVE g32
	return []rowSpec{
		{"hash", true, one(rowHash), ""},
		{"cas", true, one(rowCAS), ""},
		{"push-pull", true, rowsPushPull, ""},
		{"rtn", true, one(func(e *env) (Row, error) { return rowRTN(e, rtnLayers) }), ""},
		{"gptq-5120", true, one(func(e *env) (Row, error) { return rowGPTQ(e, 5120, 5120) }), ""},
		{"calib", true, one(rowCalib), ""},
		{"gptq-17408", false, one(func(e *env) (Row, error) { return rowGPTQ(e, 5120, 17408) }),
			"K = 17408: about 1.0e13 flops per run, tens of minutes on 2 cores even with OpenBLAS"},
		{"noop", true, one(rowNoop), ""},
		{"scale-noop", true, one(rowScaleNoop), ""},
		{"scale-rtn", false, one(func(e *env) (Row, error) { return rowScaleBuild(e, "rtn", scaleLayers, e.mem) }),
			"1+2+4+8 cold builds of 27B-width layers: about 15 layers of RTN, over 15 minutes on 2 cores"},
		{"scale-gptq", false, one(func(e *env) (Row, error) { return rowScaleBuild(e, "gptq", scaleLayers, 8<<30) }),
			"every layer has a 17408-wide ffn_down GPTQ: hours for 1+2+4+8 layers on 2 cores"},
		{"rss", false, one(func(e *env) (Row, error) { return rowRSS(e, rssBudgets) }),
			"two cold 2-layer GPTQ builds of 27B widths (each with two 17408-wide GPTQs): one to two hours on 2 cores"},
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		profile  = flag.String("profile", "quick", "quick (about 10 minutes on 2 cores) or full (hours: 17408-wide GPTQ, 27B-shaped GPTQ builds)")
		runs     = flag.Int("runs", 3, "runs per measurement")
		longRuns = flag.Int("long-runs", 1, "runs per measurement of the long rows (rtn, gptq-*, scale-rtn, scale-gptq, rss)")
		scaleSet = flag.String("scale-layers", "1,2,4,8", "layer counts of the cold-build scaling rows")
		only     = flag.String("only", "", "comma-separated row ids to run (default: the profile's rows)")
		skip     = flag.String("skip", "", "comma-separated row ids not to run")
		dir      = flag.String("dir", "", "scratch directory (default: a new temporary directory); removed at the end")
		jsonOut  = flag.String("json", "bench/results.json", "write the results as JSON here")
		mdOut    = flag.String("md", "docs/performance.md", "write the markdown table between the bench markers of this file (\"\": do not)")
		blas     = flag.Bool("blas", false, "build orkpipe with -tags blas (cgo, libopenblas-dev)")
		size     = flag.String("size", "2GiB", "size of the file hashed, ingested, pushed and pulled")
		mem      = flag.String("mem", "8GiB", "--mem of the RTN and no-op builds")
		rssMem   = flag.String("rss-mem", "4GiB,8GiB", "--mem budgets of the rss row's builds, comma-separated")
		lq       = flag.String("llama-quantize", "", "llama.cpp's llama-quantize binary, the rtn row's baseline (default: llama-quantize on PATH)")
		pureGo   = flag.Bool("gptq-pure-go", true, "measure the GPTQ rows in the pure-Go build too (K=17408 pure Go: about an hour on 2 cores)")
		calibGo  = flag.Bool("calib-pure-go", true, "measure the calib row in the pure-Go build too (a few minutes on 2 cores)")
		worker   = flag.String("worker", "", "internal: run one measurement in this process (gptq, calib, gemm)")
		wn       = flag.Int("n", 5120, "internal: -worker gptq: rows of the weight; -worker calib: n_ff")
		wk       = flag.Int("k", 5120, "internal: -worker gptq: columns of the weight; -worker calib: n_embd")
		wseqs    = flag.Int("seqs", 4, "internal: -worker calib: calibration sequences")
		wctx     = flag.Int("ctx", 128, "internal: -worker calib: tokens per sequence")
		wcorpus  = flag.String("corpus", "pipelines/recipes/demo-corpus.txt", "internal: -worker calib: calibration corpus")
		wprof    = flag.String("cpuprofile", "", "internal: -worker calib: write a CPU profile of the calibrate node here")
		verbose  = flag.Bool("v", false, "log every run")
		render   = flag.String("render", "", "measure nothing: re-render the table (and -json) from this results JSON, after -merge")
		merge    = flag.String("merge", "", "keep the rows of this earlier results JSON that this run does not measure (each marked with its run's time)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *worker != "" {
		blascore.Reexec(os.Stderr) // as orkpipe does: the worker measures the kernels a build would use
		switch *worker {
		case "gptq":
			return runGPTQWorker(ctx, os.Stdout, *wn, *wk)
		case "calib":
			return runCalibWorker(ctx, os.Stdout, *wk, *wn, *wseqs, *wctx, *wcorpus, *wprof)
		case "gemm":
			return runGemmWorker(os.Stdout)
		}
		return fmt.Errorf("-worker %q: want gptq, calib or gemm", *worker)
	}
	if *render != "" {
		return renderOnly(*render, *merge, *jsonOut, *mdOut)
	}
	if *profile != "quick" && *profile != "full" {
		return fmt.Errorf("-profile %q: want quick or full", *profile)
	}
	if *runs < 1 || *longRuns < 1 {
		return fmt.Errorf("-runs %d, -long-runs %d: want at least 1", *runs, *longRuns)
	}
	layers, err := parseLayers(*scaleSet)
	if err != nil {
		return err
	}
	var budgets []int64
	for _, f := range strings.Split(*rssMem, ",") {
		b, err := units.ParseSize(strings.TrimSpace(f))
		if err != nil || b <= 0 {
			return fmt.Errorf("-rss-mem %q: want sizes such as 4GiB,8GiB separated by commas", *rssMem)
		}
		budgets = append(budgets, b)
	}
	sz, err := units.ParseSize(*size)
	if err != nil {
		return fmt.Errorf("-size: %w", err)
	}
	mb, err := units.ParseSize(*mem)
	if err != nil {
		return fmt.Errorf("-mem: %w", err)
	}
	all := specs(*profile, layers, budgets)
	selected, err := selectRows(all, *profile, *only, *skip)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	scratch := *dir
	if scratch == "" {
		if scratch, err = os.MkdirTemp("", "orkpipe-bench-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	if scratch, err = filepath.Abs(scratch); err != nil {
		return err
	}
	defer os.RemoveAll(scratch)

	rep := &Report{Started: time.Now(), Profile: *profile, Runs: *runs, LongRuns: *longRuns, BLAS: *blas}
	if rep.Machine, err = machineFacts(); err != nil {
		return err
	}
	e := &env{ctx: ctx, dir: scratch, blas: *blas, runs: *runs, longRuns: *longRuns, size: sz, profile: *profile, log: log, mem: mb, gptqPureGo: *pureGo, calibPureGo: *calibGo,
		corpus: filepath.Join(root, "pipelines", "recipes", "demo-corpus.txt")}
	e.llamaQuantize, e.llamaQuantizeWhy = findLlamaQuantize(*lq)
	if err := e.buildBinaries(*blas, needsBLASWorker(selected)); err != nil {
		return err
	}
	failed := 0
	for _, s := range all {
		if !slices.Contains(selected, s.id) {
			rep.Rows = append(rep.Rows, Row{ID: s.id, Title: s.id, Skipped: skipReason(s, *profile, *only, *skip)})
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s: running (%s)\n", s.id, time.Now().Format("15:04:05"))
		rows, err := s.run(e)
		if len(rows) == 0 {
			rows = []Row{{ID: s.id, Title: s.id}}
		}
		for i := range rows {
			if err != nil {
				failed++
				rows[i].Note = strings.TrimSpace(rows[i].Note + " FAILED: " + err.Error())
			}
			rows[i].finish()
		}
		rep.Rows = append(rep.Rows, rows...)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", s.id, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	rep.Finished = time.Now()
	rep.Machine.LoadEnd = loadAverage()
	if *merge != "" {
		if err := mergeRows(rep, *merge); err != nil {
			return err
		}
	}
	rep.Targets = targets(rep)
	md := Markdown(rep)
	fmt.Print(md)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, rep); err != nil {
			return err
		}
	}
	if *mdOut != "" {
		if err := spliceFile(*mdOut, md); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d row(s) failed (see the notes)", failed)
	}
	return ctx.Err()
}

func selectRows(all []rowSpec, profile, only, skip string) ([]string, error) {
	ids := map[string]bool{}
	for _, s := range all {
		ids[s.id] = true
	}
	list := func(flagName, v string) ([]string, error) {
		var out []string
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id == "" {
				continue
			}
			if !ids[id] {
				return nil, fmt.Errorf("%s: unknown row %q (rows: %s)", flagName, id, strings.Join(slices.Sorted(mapsKeys(ids)), ", "))
			}
			out = append(out, id)
		}
		return out, nil
	}
	o, err := list("-only", only)
	if err != nil {
		return nil, err
	}
	sk, err := list("-skip", skip)
	if err != nil {
		return nil, err
	}
	var sel []string
	for _, s := range all {
		in := (len(o) == 0 && (s.quick || profile == "full")) || slices.Contains(o, s.id)
		if in && !slices.Contains(sk, s.id) {
			sel = append(sel, s.id)
		}
	}
	return sel, nil
}

func skipReason(s rowSpec, profile, only, skip string) string {
	why := skipWhy(s, profile, only, skip)
	if s.long != "" {
		why += " (" + s.long + ")"
	}
	return why
}

func skipWhy(s rowSpec, profile, only, skip string) string {
	switch {
	case slices.Contains(strings.Split(skip, ","), s.id):
		return "skipped: -skip " + s.id
	case only != "":
		return "skipped: not in -only"
	case !s.quick && profile == "quick":
		return "skipped: -profile full only"
	}
	return "skipped"
}

func mapsKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func needsBLASWorker(sel []string) bool {
	for _, id := range sel {
		if strings.HasPrefix(id, "gptq-") || id == "calib" || id == "scale-gptq" {
			return true
		}
	}
	return false
}

// buildBinaries builds orkpipe as README.md installs it — static (CGO_ENABLED=0), or with -tags
// blas (cgo) if asked — and, for the GPTQ rows, this harness twice: pure Go and with -tags blas (a
// failed blas build skips only the blas measures, saying why), for the GPTQ and calib rows' workers.
func (e *env) buildBinaries(blas, gptq bool) error {
	bin := filepath.Join(e.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	e.orkpipe = filepath.Join(bin, "orkpipe")
	args := []string{"build", "-o", e.orkpipe}
	if blas {
		args = append(args, "-tags", "blas")
	}
	cmd := exec.CommandContext(e.ctx, "go", append(args, "./cmd/orkpipe")...)
	if !blas {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s ./cmd/orkpipe: %w\n%s", strings.Join(args, " "), err, out)
	}
	if !gptq {
		return nil
	}
	e.self = filepath.Join(bin, "bench")
	if out, err := exec.CommandContext(e.ctx, "go", "build", "-o", e.self, "./bench").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./bench: %w\n%s", err, out)
	}
	blasBin := filepath.Join(bin, "bench-blas")
	if out, err := exec.CommandContext(e.ctx, "go", "build", "-tags", "blas", "-o", blasBin, "./bench").CombinedOutput(); err != nil {
		e.blasErr = fmt.Sprintf("go build -tags blas ./bench failed (needs cgo and apt-get install -y libopenblas-dev): %s", firstError(string(out)))
	} else {
		e.blasSelf = blasBin
	}
	return nil
}

// firstError returns the first line of go build output that is not a "# package" header.
func firstError(s string) string {
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if !strings.HasPrefix(line, "#") {
			return line
		}
	}
	return strings.TrimSpace(s)
}

// repoRoot is the directory of orkpipe's go.mod (the harness runs go build there).
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run bench from inside the orkpipe module (go env GOMOD is empty)")
	}
	return filepath.Dir(mod), nil
}

// parseLayers reads -scale-layers: at least two distinct positive layer counts.
func parseLayers(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &n); err != nil || n < 1 || slices.Contains(out, n) {
			return nil, fmt.Errorf("-scale-layers %q: want distinct positive layer counts separated by commas", s)
		}
		out = append(out, n)
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("-scale-layers %q: a linear fit needs at least two sizes", s)
	}
	return out, nil
}
