package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"orkpipe/artifacts"
	"orkpipe/internal/units"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/progress"
	"orkpipe/pipelines/recipe"
	"orkpipe/pipelines/verify"
	"orkpipe/registry"
	"orkpipe/stages"
)

func newBuildCommand(opts *globalOptions) *cobra.Command {
	var flags buildFlags
	var sets []string
	var planOnly bool
	var board transportFlags
	cmd := &cobra.Command{
		Use:   "build RECIPE",
		Short: "Build a pack from a recipe: plan the DAG, run what is not cached, materialize pack, stub, report, provenance",
		Long: "build reads RECIPE (YAML, docs/recipes.md), applies the --set overrides, plans the build DAG (calibration\n" +
			"windows sized to --mem), runs only the nodes that are not cached, and materializes read-only into the\n" +
			"output directory: <name>.orkpack, <name>.orkpack.gguf (the stub), report.json, report.html (the report\n" +
			"drawn: one self-contained page), summary.txt and provenance.json (in-toto Statement, SLSA provenance v1).\n" +
			"A second run executes nothing. Every run also writes its timeline (each executed node's start, end and\n" +
			"declared memory) to .orkpipe-timeline.html there: hidden, so that push leaves it out. --plan prints the\n" +
			"plan (every node, its key, whether it is cached) without running anything.\n\n" +
			"The progress output estimates the time left from what the build's nodes of each kind took and, from the\n" +
			"start, from what they took in earlier builds of the same name and model (kept in the cache's history:\n" +
			"docs/cli.md); plan and --plan estimate a whole build the same way. A build whose nodes not cached would\n" +
			"write more into the cache than its filesystem has free is refused before anything runs (--no-space-check).\n\n" +
			"A recipe with board_verify also requires a board verification of the built pack: it is satisfied only by a\n" +
			"matching attestation signed with board_verify.trust and attached to board_verify.ref (`orkpipe verify REF\n" +
			"--run CMD --attest REF --sign KEY` on the board host); the board command is never run here, and a build\n" +
			"whose requirement no attestation matches fails, naming each attestation seen and why it did not match.",
		Args: func(cmd *cobra.Command, args []string) error { return asUsage(cobra.ExactArgs(1)(cmd, args)) },
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBuild(cmd.Context(), opts, args[0], sets, flags, board, planOnly)
		},
	}
	flags.register(cmd, "")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a recipe key by its dotted path, e.g. --set source.model=M.gguf (repeatable)")
	cmd.Flags().BoolVar(&planOnly, "plan", false, "print the plan (nodes, stages, keys, cached or not, memory) and run nothing")
	cmd.Flags().BoolVar(&flags.noSpaceCheck, "no-space-check", false, "start even when the nodes not cached would write more into the cache than its filesystem has free, or the results' copies more into -o (on another filesystem) than it has free")
	cmd.Flags().BoolVar(&board.plainHTTP, "board-verify-plain-http", false, "use plain HTTP (no TLS) for the registry of the recipe's board_verify.ref")
	cmd.Flags().BoolVar(&board.insecure, "board-verify-insecure", false, "allow plain HTTP and skip TLS certificate checks for board_verify.ref")
	return cmd
}

// roleSink renames the summary's outputs from export names to their roles (pack, stub, report,
// summary, provenance), the contract of `build --json`, and hands every event to the timeline.
type roleSink struct {
	progress.Sink
	roles    map[string]string
	timeline *progress.TimelineRecorder
}

func (s roleSink) Emit(e engine.Event) {
	s.timeline.Emit(e)
	if e.Summary != nil {
		sum := *e.Summary
		sum.Outputs = map[string]string{}
		for name, v := range e.Summary.Outputs {
			if role, ok := s.roles[name]; ok {
				name = role
			}
			sum.Outputs[name] = v
		}
		e.Summary = &sum
	}
	s.Sink.Emit(e)
}

func runBuild(ctx context.Context, opts *globalOptions, path string, sets []string, flags buildFlags, board transportFlags, planOnly bool) (err error) {
	r, err := recipe.Load(path, sets...)
	if err != nil {
		return asUsage(err)
	}
	req, err := boardRequirementOf(r, board, opts)
	if err != nil {
		return err
	}
	check, err := flags.checkStages() // after boardRequirementOf, which registers verify-board
	if err != nil {
		return err
	}
	if check != nil && planOnly {
		return usagef("--check runs nodes again; --plan runs nothing")
	}
	mem, err := opts.memBudget()
	if err != nil {
		return err
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The nodes' declared peaks fit the budget; make the Go runtime collect before its memory
		// (live data plus garbage not yet collected) outgrows the budget less what lives outside
		// the Go runtime's accounting.
		debug.SetMemoryLimit(goMemoryLimit(mem))
	}
	// Buffers that nodes hand on to later nodes of this process (stages.SetBufferPoolLimit), and
	// hashes that read files rather than map them (artifacts.SetHashReads).
	stages.SetBufferPoolLimit(min(mem/16, 256<<20))
	artifacts.SetHashReads(true)
	speeds := &speedsSource{opts: opts}
	t, err := build.New(r, build.WithMemoryBudget(mem), build.WithOverrides(sets), speeds.option())
	if err != nil {
		return err
	}
	if flags.outDir == "" {
		flags.outDir = r.Output
	}
	if flags.outDir == "" {
		flags.outDir = filepath.Join("orkpipe-out", r.Name)
	}
	roles, timeline := t.Roles(), progress.NewTimelineRecorder()
	var eta *progress.ETA
	if !planOnly {
		var keep func()
		eta, keep = buildETA(opts, t)
		defer keep()
	}
	s, err := openEngine(ctx, opts, engineSetup{keepGoing: flags.keepGoing, events: !planOnly, readOnly: planOnly, exec: flags.exec, remote: flags.remote, board: req,
		wrap: func(sink progress.Sink) progress.Sink { return roleSink{Sink: sink, roles: roles, timeline: timeline} }, eta: eta})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	eng := s.engine
	// A build whose executable, budget, graph, sources, tools and stored outputs are what its last
	// build saw is served from that build's memo (engine package doc, "Build memo"): without
	// planning the graph when the memo was written under this recipe's plan key
	// (build.Target.PlanKey), else with the graph planned while the memo is read ahead.
	planKey, err := t.PlanKey()
	if err != nil {
		return err
	}
	bopts := engine.BuildOptions{OutDir: flags.outDir, Force: flags.force, Check: check, Plan: planKey}
	if !flags.noSpaceCheck {
		// Also where nothing is planned (a build served from its memo): copying the results into
		// -o on another filesystem must fit there.
		bopts.BeforeDeliver = func(ctx context.Context, exports map[string]artifacts.Object) error {
			return exportSpace(ctx, opts, s.store, exports, flags.outDir).check(t.Name())
		}
	}
	var ahead *engine.MemoAhead
	var res *engine.Result
	if !planOnly && check == nil {
		ahead = eng.ReadMemoAhead(ctx, t.Name())
		if res, err = ahead.BuildUnplanned(ctx, planKey, bopts); res != nil {
			opts.logger.Info("build served from its memo without planning the graph", "target", t.Name())
		}
	}
	if res == nil && err == nil {
		g, gerr := t.Graph(ctx) // the memo, if read ahead, is checked meanwhile
		if gerr != nil {
			return asUsage(gerr)
		}
		if ahead != nil {
			res, err = ahead.Build(ctx, g, bopts)
		}
		if res == nil && err == nil {
			plan, perr := eng.Plan(g)
			if perr != nil {
				return asUsage(perr)
			}
			if planOnly {
				return printBuildPlan(ctx, opts, s, plan, t, mem, flags.outDir, speeds)
			}
			if !flags.noSpaceCheck {
				if err := checkSpace(ctx, opts, s, plan, t.Name(), flags.outDir); err != nil {
					return err
				}
			}
			res, err = eng.Build(ctx, t.Name(), plan, bopts)
		}
	}
	// The timeline of this run, beside the outputs (also when it failed): not a DAG output, since
	// timings differ on every run (reporthtml.TimelineFile).
	tpath, terr := progress.WriteTimeline(flags.outDir, timeline.Timeline(t.Name(), opts.jobs, mem))
	if terr != nil {
		opts.logger.Warn("no build timeline", "err", terr)
	}
	if err != nil {
		if terr == nil && !opts.json {
			fmt.Fprintf(opts.stderr, "timeline of this run: %s\n", tpath)
		}
		return err
	}
	if !opts.json {
		if p, ok := res.Outputs[t.Exports().Summary]; ok {
			if b, rerr := os.ReadFile(p); rerr == nil {
				fmt.Fprintf(opts.stdout, "\n%s", b)
			}
		}
		fmt.Fprintf(opts.stdout, "outputs in %s\n", flags.outDir)
		if terr == nil {
			fmt.Fprintf(opts.stdout, "timeline of this run: %s\n", tpath)
		}
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
			fmt.Fprintf(opts.stdout, "memory: peak RSS of this process %s; highest declared memory of nodes running at once %s; budget %s\n",
				units.FormatSize(ru.Maxrss*1024), units.FormatSize(res.PeakMemory), units.FormatSize(mem))
		}
	}
	return nil
}

// boardRequirementOf returns where the recipe's board_verify is looked for (nil without one) and
// registers the verify-board stage kind the plan then contains.
func boardRequirementOf(r *recipe.Recipe, tf transportFlags, opts *globalOptions) (*boardRequirement, error) {
	b := r.BoardVerify
	if b == nil {
		if tf.plainHTTP || tf.insecure {
			return nil, usagef("--board-verify-plain-http and --board-verify-insecure need a recipe with board_verify")
		}
		return nil, nil
	}
	ropts, err := tf.options(b.Ref)
	if err != nil {
		return nil, err
	}
	key, err := registry.LoadPublicKey(b.Trust)
	if err != nil {
		return nil, usagef("recipe %s: board_verify.trust: %v", r.Path, err)
	}
	ropts = append(ropts, registry.WithTrust(key), registry.WithLogger(opts.logger))
	verify.RegisterKind()
	return &boardRequirement{ref: b.Ref, options: ropts}, nil
}

// printBuildPlan prints the plan of a build like `orkpipe plan`: every node, its key (or pending),
// whether it is cached, its declared memory and its dependencies, and what it writes into the cache
// and, on another filesystem, into outDir.
func printBuildPlan(ctx context.Context, opts *globalOptions, s *engineSession, plan *engine.Plan, t engine.Target, budget int64, outDir string, speeds *speedsSource) error {
	name := t.Name()
	nodes, err := s.engine.Status(ctx, plan)
	if err != nil {
		return err
	}
	est, space := estimatePlan(opts, t, nodes, speeds), spaceOf(ctx, opts, s.store, nodes, outDir)
	if opts.json {
		out := planOutput{Target: name, Budget: budget, Nodes: nodes}
		est.setJSON(&out)
		space.setJSON(&out)
		return json.NewEncoder(opts.stdout).Encode(out)
	}
	if err := writeNodeTable(opts.stdout, nodes, name, budget); err != nil {
		return err
	}
	est.write(opts.stdout)
	space.write(opts.stdout)
	writeSameAs(opts.stdout, nodes)
	return nil
}

// nonGoPerCPU is the resident memory per CPU reserved for what the Go runtime does not account for:
// an OpenBLAS thread's work buffer (32 MiB on x86-64 in -tags blas builds), its C stack, and the
// buffers of goroutines calling BLAS at the same time from their own threads, with room for one more
// caller (how it was sized: docs/performance.md, "Measurements behind design choices").
const nonGoPerCPU = 64 << 20

// goMemoryLimit returns the Go runtime's soft memory limit for a build under the budget mem: mem
// less a reserve for resident memory outside the runtime's accounting (64 MiB for the binary, C
// allocations and thread stacks, plus nonGoPerCPU per CPU), the reserve capped at a quarter of mem.
func goMemoryLimit(mem int64) int64 {
	return mem - min(64<<20+int64(runtime.NumCPU())*nonGoPerCPU, mem/4)
}

// buildETA returns the estimator of the time left in t's build, primed with the costs that earlier
// builds of t from the same source kept in the cache's history (progress.CostsFile, costSource;
// calibrate's and propagate's scaled to this build's calibration tokens, tokenStages), and
// keep, which adds what this build measured to them; call it when the build is over (also after a
// failure: what finished was measured). An unreadable costs file is logged, and the build is
// estimated from its own nodes alone.
func buildETA(opts *globalOptions, t engine.Target) (eta *progress.ETA, keep func()) {
	eta = progress.NewETA()
	dir, err := opts.cache()
	if err != nil {
		return eta, func() {} // openEngine reports it
	}
	path, source, tokens := progress.CostsFile(engine.HistoryDir(dir), t.Name()), costSource(t), calibrationTokens(t)
	prior, err := progress.ReadCosts(path, t.Name(), source)
	if err != nil {
		opts.logger.Warn("earlier builds' costs not read: the time left is estimated from this build's nodes alone", "err", err)
	}
	eta.Prime(progress.ScaleTokens(prior, tokens))
	ratesPath := progress.RatesFile(engine.HistoryDir(dir))
	eta.Model(runtime.GOMAXPROCS(0), hostRates(opts, ratesPath))
	start := time.Now()
	return eta, func() {
		if rates := eta.Rates(start); len(rates) > 0 {
			if err := progress.KeepRates(ratesPath, rates); err != nil {
				opts.logger.Warn("keeping this build's rates for the next builds' estimates", "err", err)
			}
		}
		measured := progress.StampTokens(eta.Costs(start), tokens, tokenStages...)
		if len(measured) == 0 {
			return
		}
		if err := progress.KeepCosts(path, t.Name(), source, measured); err != nil {
			opts.logger.Warn("keeping this build's costs for the next build's estimate", "err", err)
		}
	}
}

// hostRates reads the rates the builds in the cache kept (progress.RatesFile) at path; a file that cannot
// be read is logged, and the modeled costs are then taken over the cores at the speed the cost model says.
func hostRates(opts *globalOptions, path string) []progress.StageRate {
	rates, err := progress.ReadRates(path)
	if err != nil {
		opts.logger.Warn("earlier builds' rates not read: nodes no build has timed are estimated by the cost model alone", "err", err)
	}
	return rates
}

// tokenStages are the stages whose nodes' cost grows with the calibration tokens (each runs every
// calibration sequence through its window's blocks): their costs are kept with the tokens that
// measured them, and scaled to another build's (progress.StampTokens, ScaleTokens).
var tokenStages = []string{"calibrate", "propagate"}

// calibrationTokens is t's calibration size, sequences × ctx; 0 for a target without a recipe or
// without calibration (RTN only).
func calibrationTokens(t engine.Target) int64 {
	rt, ok := t.(interface{ Recipe() *recipe.Recipe })
	if !ok || rt.Recipe().Calibration == nil {
		return 0
	}
	c := rt.Recipe().Calibration
	return int64(c.Sequences) * int64(c.Ctx)
}

// costSource names what the costs of t's nodes depend on most, its model, for the costs file
// (progress.KeepCosts): a GGUF source by its size — the same shape at the same types, whatever its
// path and weights —, a synthetic one by its shape (its seed changes no cost); "" for a target
// without a recipe (the demo) or a source that cannot be read (the build reports it).
func costSource(t engine.Target) string {
	rt, ok := t.(interface{ Recipe() *recipe.Recipe })
	if !ok {
		return ""
	}
	src := rt.Recipe().Source
	if src.Synth != nil {
		shape := *src.Synth
		shape.Seed = 0
		b, err := json.Marshal(shape)
		if err != nil {
			return ""
		}
		return "synth " + string(b)
	}
	fi, err := os.Stat(src.Model)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("gguf %d bytes", fi.Size())
}
