package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"orkpipe/internal/units"
	"orkpipe/ork/hostspeed"
	"orkpipe/pipelines"
	"orkpipe/pipelines/dagview"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/progress"
	"orkpipe/stages"
)

func newPlanCommand(opts *globalOptions) *cobra.Command {
	var sets []string
	var g graphFlags
	cmd := &cobra.Command{
		Use:   "plan TARGET|RECIPE",
		Short: "Print the DAG of a target (nodes, stage, key, cached or not, memory estimate) without running it",
		Long: "plan prints every node of TARGET (\"demo\" for the built-in demo, or a recipe file) with its stage, its key (short; \"pending\"\n" +
			"while it depends on outputs not built yet), whether its outputs are cached and its declared peak memory, then\n" +
			"how long the nodes not cached should take (by what earlier builds of the target from the same model measured,\n" +
			"and the stages' cost model at the rates the builds in the cache measured for what they did not, or before any\n" +
			"at this host's kernel speed, measured once per cache and binary; ORKPIPE_HOST_SPEEDS=reference takes the\n" +
			"reference host's) and what they write.\n" +
			"Nodes with identical key material are reported. -v prints each node's key material; --json prints it all.\n" +
			"A recipe with a residency section (an MoE model) also gets its residency plan's expected hit rate and the hit\n" +
			"rate vs budget curve: from the cached plan, or computed from the cached routing statistics of an earlier build\n" +
			"(so --set residency.budget=... shows what a budget gives before building), or \"pending\" before the first build.\n\n" +
			"--format dot (Graphviz: orkpipe plan R --format dot | dot -Tsvg > plan.svg) or mermaid draws the graph instead:\n" +
			"the per-weight nodes of one kind in one layer window are one box with their count, the largest memory one\n" +
			"declares and how many are cached (grey: all cached); --group=false draws every node.",
		Args: func(cmd *cobra.Command, args []string) error { return asUsage(cobra.ExactArgs(1)(cmd, args)) },
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPlan(cmd.Context(), opts, args[0], sets, g)
		},
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a recipe key by its dotted path (key.sub=value); repeatable")
	g.register(cmd)
	return cmd
}

// graphFlags choose how plan and explain print the graph.
type graphFlags struct {
	format string
	group  bool
}

func (g *graphFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&g.format, "format", "text", "text, dot (Graphviz) or mermaid")
	cmd.Flags().BoolVar(&g.group, "group", true, "with dot or mermaid: one box per node kind and layer window")
}

// check validates the flags; drawing reports whether a graph is to be drawn.
func (g graphFlags) check(opts *globalOptions) (drawing bool, err error) {
	switch g.format {
	case "text":
		return false, nil
	case "dot", "mermaid":
		if opts.json {
			return false, usagef("--format %s and --json: choose one", g.format)
		}
		return true, nil
	}
	return false, usagef("--format: %q, want text, dot or mermaid", g.format)
}

// draw writes nodes in the chosen format.
func (g graphFlags) draw(opts *globalOptions, nodes []dagview.Node, o dagview.Options) error {
	o.Group = g.group
	if g.format == "mermaid" {
		return dagview.WriteMermaid(opts.stdout, nodes, o)
	}
	return dagview.WriteDOT(opts.stdout, nodes, o)
}

// viewNodes converts planned nodes for drawing.
func viewNodes(nodes []engine.NodeStatus) []dagview.Node {
	out := make([]dagview.Node, len(nodes))
	for i, n := range nodes {
		out[i] = dagview.Node{ID: n.ID, Stage: n.Stage, Deps: n.Deps, Mem: n.Mem, Cached: n.Cached}
	}
	return out
}

// planOutput is the --json output of plan.
type planOutput struct {
	Target string              `json:"target"`
	Budget int64               `json:"mem_budget"`
	Nodes  []engine.NodeStatus `json:"nodes"`
	// Residency is an MoE build's residency plan (expected hit rate, curve), when known (planResidency).
	Residency *stages.ResidencyFile `json:"residency,omitempty"`
	// EstimateMS is how long the nodes not cached should take by the costs earlier builds kept and
	// the nodes' modeled costs (planEstimate), when known; EstimateLower marks a lower bound.
	// EstimateModeled counts the nodes estimated by their modeled costs (cost_ns), EstimateRated
	// those of them at the rates the builds in the cache measured.
	EstimateMS      *int64 `json:"estimate_ms,omitempty"`
	EstimateLower   bool   `json:"estimate_lower,omitempty"`
	EstimateModeled int    `json:"estimate_modeled,omitempty"`
	EstimateRated   int    `json:"estimate_rated,omitempty"`
	// EstimateStagesMS is estimate_ms by the nodes' stages.
	EstimateStagesMS map[string]int64 `json:"estimate_stages_ms,omitempty"`
	// HostSpeeds are the speeds the nodes' modeled costs (cost_ns) are at: this host's, measured, or
	// the reference host's (hostspeed.Speeds); absent for a target without modeled costs.
	HostSpeeds *hostspeed.Speeds `json:"host_speeds,omitempty"`
	// WritesBytes is what the nodes not cached write into the cache, with the outputs of the nodes
	// cached only in the remote cache, which the build downloads there (planSpace); CacheFreeBytes the
	// space its filesystem has, when known.
	WritesBytes    int64  `json:"writes_bytes"`
	CacheFreeBytes *int64 `json:"cache_free_bytes,omitempty"`
	// OutputDir is build --plan's results directory when it is on another filesystem than the cache
	// (the results are copies there), OutputWritesBytes what copying the results not already in
	// place writes there, OutputFreeBytes the space that filesystem has.
	OutputDir         string `json:"output_dir,omitempty"`
	OutputWritesBytes int64  `json:"output_writes_bytes,omitempty"`
	OutputFreeBytes   *int64 `json:"output_free_bytes,omitempty"`
}

// planEstimate is how long building nodes should take: the nodes not cached, by the costs that
// earlier builds of target kept in the cache's history (progress.CostsFile), and the others by their
// modeled costs at this host's rates (progress.RatesFile).
type planEstimate struct {
	target string
	run    int           // nodes not cached
	speeds *speedsSource // the speeds the modeled costs are at
	progress.Estimated
}

// estimatePlan estimates the build of t's nodes, by the costs of t's builds from the same source
// (costSource) and the nodes' modeled costs. A costs or rates file that cannot be read is logged, and
// the estimate does without it. speeds is the source of the host speeds the target planned at.
func estimatePlan(opts *globalOptions, t engine.Target, nodes []engine.NodeStatus, speeds *speedsSource) planEstimate {
	target := t.Name()
	e := planEstimate{target: target, speeds: speeds}
	var run []engine.NodeStatus
	for _, n := range nodes {
		if !n.Cached {
			run = append(run, n)
		}
	}
	e.run = len(run)
	dir, err := opts.cache()
	if err != nil || len(run) == 0 {
		return e
	}
	hist := engine.HistoryDir(dir)
	costs, err := progress.ReadCosts(progress.CostsFile(hist, target), target, costSource(t))
	if err != nil {
		opts.logger.Warn("earlier builds' costs not read: the estimate rests on the nodes' modeled costs", "err", err)
	}
	e.Estimated = progress.Estimate(progress.ScaleTokens(costs, calibrationTokens(t)), runtime.GOMAXPROCS(0),
		hostRates(opts, progress.RatesFile(hist)), run)
	return e
}

// setJSON sets out's estimate fields.
func (e planEstimate) setJSON(out *planOutput) {
	if e.OK {
		ms := e.Left.Milliseconds()
		out.EstimateMS, out.EstimateLower = &ms, e.Lower
		out.EstimateModeled, out.EstimateRated = e.Modeled, e.Rated
		if e.speeds != nil {
			out.HostSpeeds = e.speeds.speeds
		}
		out.EstimateStagesMS = map[string]int64{}
		for st, d := range e.Stages {
			out.EstimateStagesMS[st] = d.Milliseconds()
		}
	}
}

// write prints the estimate's line after the plan's table: nothing when every node is cached.
func (e planEstimate) write(w io.Writer) {
	if e.run == 0 {
		return
	}
	if !e.OK {
		fmt.Fprintf(w, "estimated time: unknown for the %d nodes not cached (no earlier build of %s from this model kept its nodes' costs, and they have no modeled cost)\n", e.run, e.target)
		return
	}
	var from []string
	if e.Modeled < e.run {
		from = append(from, fmt.Sprintf("the costs earlier builds of %s kept", e.target))
	}
	model := "the stages' cost model"
	if e.Modeled < e.run {
		model = fmt.Sprintf("%d by the stages' cost model", e.Modeled)
	}
	switch {
	case e.Modeled == 0:
	case e.Rated == e.Modeled:
		from = append(from, model+" at the rates earlier builds in this cache measured")
	case e.Rated == 0:
		from = append(from, model+" at "+e.speeds.describe()+", no build in this cache having measured its rates")
	default:
		from = append(from, fmt.Sprintf("%s, %d of them at the rates earlier builds in this cache measured, the others at %s", model, e.Rated, e.speeds.describe()))
	}
	if e.Lower {
		fmt.Fprintf(w, "estimated time: at least %s for the %d nodes not cached (%s; some of its stages have neither)\n",
			progress.RoundLeft(e.Left), e.run, strings.Join(from, "; "))
		e.writeStages(w)
		return
	}
	fmt.Fprintf(w, "estimated time: %s for the %d nodes not cached (%s)\n", progress.About(e.Left), e.run, strings.Join(from, "; "))
	e.writeStages(w)
}

// writeStages prints where an estimate of a second or more goes, by stage, the longest first: the
// stages of at least 1% of it, then the others together.
func (e planEstimate) writeStages(w io.Writer) {
	if e.Left < time.Second || len(e.Stages) < 2 {
		return
	}
	stages := slices.Collect(maps.Keys(e.Stages))
	slices.SortFunc(stages, func(a, b string) int {
		if c := cmp.Compare(e.Stages[b], e.Stages[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	var rest time.Duration
	others := 0
	for _, st := range stages {
		if d := e.Stages[st]; d*100 >= e.Left {
			parts = append(parts, st+" "+progress.RoundLeft(d))
		} else {
			rest += d
			others++
		}
	}
	if others > 0 {
		parts = append(parts, fmt.Sprintf("%d more stages %s", others, progress.RoundLeft(rest)))
	}
	fmt.Fprintf(w, "  by stage: %s\n", strings.Join(parts, ", "))
}

func runPlan(ctx context.Context, opts *globalOptions, arg string, sets []string, gf graphFlags) error {
	drawing, err := gf.check(opts)
	if err != nil {
		return err
	}
	mem, err := opts.memBudget()
	if err != nil {
		return err
	}
	speeds := &speedsSource{opts: opts}
	t, err := pipelines.Resolve(arg, mem, sets, speeds.option())
	if err != nil {
		return asUsage(err)
	}
	s, err := openEngine(ctx, opts, engineSetup{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	eng := s.engine
	g, err := t.Graph(ctx)
	if err != nil {
		return asUsage(err)
	}
	plan, err := eng.Plan(g)
	if err != nil {
		return asUsage(err)
	}
	nodes, err := eng.Status(ctx, plan)
	if err != nil {
		return err
	}
	budget, _ := opts.memBudget()
	if drawing {
		return gf.draw(opts, viewNodes(nodes), dagview.Options{Title: t.Name()})
	}
	res, how, err := planResidency(ctx, opts, nodes)
	if err != nil {
		return err
	}
	est, space := estimatePlan(opts, t, nodes, speeds), spaceOf(ctx, opts, s.store, nodes, "")
	if opts.json {
		out := planOutput{Target: t.Name(), Budget: budget, Nodes: nodes, Residency: res}
		est.setJSON(&out)
		space.setJSON(&out)
		return json.NewEncoder(opts.stdout).Encode(out)
	}
	if err := writeNodeTable(opts.stdout, nodes, t.Name(), budget); err != nil {
		return err
	}
	est.write(opts.stdout)
	space.write(opts.stdout)
	writePlanResidency(opts.stdout, res, how)
	writeSameAs(opts.stdout, nodes)
	if opts.verbose > 0 {
		for _, n := range nodes {
			if n.Material == nil {
				continue
			}
			b, err := n.Material.Canonical()
			if err != nil {
				return err
			}
			fmt.Fprintf(opts.stdout, "%s %s\n", n.ID, b)
		}
	}
	return nil
}

// writeNodeTable prints the plan's nodes for people, as `orkpipe plan` and `orkpipe build --plan`
// do: each node's ID, stage, key (short; "pending" while it depends on outputs not built yet),
// whether it is cached ("remote": in the remote cache only, its outputs not downloaded), its declared
// memory and its dependencies; then a line of totals.
func writeNodeTable(w io.Writer, nodes []engine.NodeStatus, name string, budget int64) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTAGE\tKEY\tCACHED\tMEM\tDEPS")
	cached, remote := 0, 0
	for _, n := range nodes {
		key, c := "pending", "no"
		if n.Key != "" {
			key = strings.TrimPrefix(n.Key, "blake3:")[:12]
		}
		switch {
		case n.Remote:
			c = "remote"
			cached++
			remote++
		case n.Cached:
			c = "yes"
			cached++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Stage, key, c, units.FormatSize(n.Mem), depsCell(n.Deps))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	inRemote := ""
	if remote > 0 {
		inRemote = fmt.Sprintf(" (%d in the remote cache)", remote)
	}
	_, err := fmt.Fprintf(w, "%s: %d nodes, %d cached%s, memory budget %s\n", name, len(nodes), cached, inRemote, units.FormatSize(budget))
	return err
}

// maxDepsShown is how many dependencies (after grouping expert slices) a node's DEPS cell lists.
const maxDepsShown = 8

// depsCell writes a node's dependencies for the plan table. The nodes of one MoE tensor's expert
// slices ("<id>#<e>") are one item, "<id>#0-31" for a contiguous run of experts, else "<id>#{k
// experts}"; after maxDepsShown items the cell says how many more there are (`--json` lists every
// dependency). An LFM2-8B-A1B window's propagate node depends on over a thousand finalize nodes.
func depsCell(deps []string) string {
	type group struct {
		id      string
		experts []int
	}
	var items []*group
	byID := map[string]*group{}
	for _, d := range deps {
		id, e := d, -1
		if i := strings.LastIndexByte(d, '#'); i >= 0 {
			if n, err := strconv.Atoi(d[i+1:]); err == nil && n >= 0 {
				id, e = d[:i], n
			}
		}
		g := byID[id]
		if g == nil || e < 0 {
			g = &group{id: id}
			items = append(items, g)
			if e >= 0 {
				byID[id] = g
			}
		}
		if e >= 0 {
			g.experts = append(g.experts, e)
		}
	}
	var out []string
	for _, g := range items[:min(len(items), maxDepsShown)] {
		slices.Sort(g.experts)
		switch n := len(g.experts); {
		case n == 0:
			out = append(out, g.id)
		case n == 1:
			out = append(out, fmt.Sprintf("%s#%d", g.id, g.experts[0]))
		case g.experts[n-1]-g.experts[0] == n-1:
			out = append(out, fmt.Sprintf("%s#%d-%d", g.id, g.experts[0], g.experts[n-1]))
		default:
			out = append(out, fmt.Sprintf("%s#{%d experts}", g.id, n))
		}
	}
	if more := len(items) - maxDepsShown; more > 0 {
		out = append(out, fmt.Sprintf("+%d more", more))
	}
	return strings.Join(out, ",")
}

// writeSameAs warns of the nodes whose key material is identical to another's.
func writeSameAs(w io.Writer, nodes []engine.NodeStatus) {
	for _, n := range nodes {
		if n.SameAs != "" {
			fmt.Fprintf(w, "warning: %s has key material identical to %s: they run once and share outputs; if they are meant to differ, their parameters or inputs are not reaching the key\n", n.ID, n.SameAs)
		}
	}
}
