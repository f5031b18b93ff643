// Package build plans a recipe (pipelines/recipe) into the DAG of one pack build: the engine.Target
// behind `orkpipe build RECIPE`.
//
// # The graph
//
//	synth (source.synth) | the source GGUF file
//	tokenize                    model + corpus -> token sequences          (only when a scheme uses gptq)
//	calibrate[a,b)              per layer window: Hessians of every linear input of layers a..b-1
//	propagate[a,b)              sequential mode: the hidden states at b through the window's finalized weights
//	finalize:<weight>           per weight: codes, scales, qerr (GPTQ with its window's Hessian, or RTN,
//	                            weighted by the recipe's imatrix for importance: imatrix); an MoE expert
//	                            tensor has one node per expert, finalize:<name>#<e>
//	routing                     MoE: the calibrate windows' routing statistics merged into routing.json
//	residency                   with residency: the hot experts under the budget (residency.json)
//	tile:<weight>               per weight: the dtype's native bytes
//	rtn-tile:<weight>           instead of finalize and tile, for an RTN weight whose finalized form
//	                            nothing else reads (no act-clip search, no propagate): both in one node,
//	                            the same entry bytes
//	finalize-promote:<weight>,  per promotion candidate: the same weight at the promoted tier
//	tile-promote:<weight>       (rtn-tile-promote:<weight> for an RTN twin without act-clip search)
//	write-orkpack               every tile + the board profile -> <name>.orkpack (promotion chosen here by qerr)
//	emit-stub                   model + the owned tensor names -> <name>.orkpack.gguf (no wait for
//	                            the pack)
//	screen                      model + pack + text -> PPL / KLD, gates; with residency also the float
//	                            model's routing of the text (the out-of-sample hit rate's, no extra pass)
//	verify-local                pack VerifyAll, stub vs pack, plan vs board
//	report                      report.json + summary.txt + report.html (stages/reporthtml)
//	sha256:<pack>, sha256:<stub> the pack's and the stub's sha256, for provenance, beside verify-local
//	provenance                  provenance.json (in-toto Statement v1, SLSA provenance v1 predicate)
//	verify-board                pack + stub + text -> board-verify.json (only with board_verify): evidence
//	                            from the board, served from a matching signed attestation in the registry by
//	                            pipelines/verify.Executor, never run on the build host
//
// Each node's parameters carry exactly what changes its output: finalize holds the scheme fields
// that change the codes and never the tile layout, so changing the tile layout never re-runs GPTQ
// (it does re-run an rtn-tile node: RTN costs seconds, a separate node would cost a weight file
// written, stored, verified and read back), and changing one class's group size re-runs only that
// class's finalize and tile nodes, then write-orkpack, screen, verify-local, report and provenance
// (emit-stub reads only the names of the tensors the pack owns) (in one-shot mode; in
// sequential mode the later windows' calibration sees the changed weights, so it re-runs too, as it
// must).
//
// The imatrix file is an input of exactly the finalize nodes whose scheme says importance: imatrix
// (and of provenance), so changing it re-runs those and what follows, never calibration or another
// weight. The planner reads its entry table first: a missing file, a missing entry or a shape
// mismatch is a plan error.
//
// # Board fit
//
// Before any node exists, Graph sizes every pack entry from its dtype and shape (board.ResidentBytes)
// and places the entries in IOMMU domains as write-orkpack will (board.PlanDomains, checkBoardFit): a
// pack the recipe's board cannot hold is a plan error wrapping ErrPlan and board.ErrDoesNotFit, with a
// *board.FitError naming the domains needed and available and the largest entries. write-orkpack skips
// a promotion that would break the fit, so a recipe that passes the check always commits.
//
// # MoE
//
// A 3-D expert tensor blk.N.ffn_{gate,up,down}_exps.weight [K, N, n_expert] becomes n_expert
// weights "<name>#<e>" (finalize parameter expert = e), each its own pack entry; the stub owns the
// whole tensor. The router blk.N.ffn_gate_inp.weight is never packed. GPTQ on an expert slice binds
// the calibrate output stages.HessianOutput names for "<name>#<e>" (that expert's Hessian).
//
// Calibration of an MoE model records how its routers spread the calibration tokens over the experts
// (node routing, exported as routing.json). A recipe's residency section plans calibration (even for
// RTN schemes), checks before anything runs that the dense weights and the budget's experts fit the
// residency domains (checkBoardFit: board.ResidencyWindow, a *board.ResidencyError naming experts, bytes
// and window otherwise), and adds the residency node (residency.json, stored by write-orkpack in the pack)
// and, with a screen, has the screen count the float model's routing of its text (the held-out routing
// the report scores the plan against); changing only the budget re-runs residency, write-orkpack and
// what follows it.
//
// # Multi-token prediction
//
// A qwen35 file's multi-token-prediction blocks (stages.ModelShape.NextN: blk.N for N from the trunk's
// block count on) are never packed, whatever the schemes match: they stay in the stub as stored, and
// the report names them (stages.ReportNextN). A scheme that matches only their tensors is a plan error.
//
// # Memory
//
// Every node declares its peak memory (the stage's estimate). Calibration windows with window: auto
// are the largest number of layers whose calibrate node fits the budget; a window or a weight that
// cannot fit is a plan error naming it.
package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"

	"orkpipe/artifacts"
	"orkpipe/ork/hostspeed"
	"orkpipe/pipelines/recipe"
)

// ErrPlan is wrapped by every planning error (a recipe that cannot be built as written).
var ErrPlan = errors.New("cannot plan the recipe")

// Target is a recipe planned against a memory budget.
type Target struct {
	r         *recipe.Recipe
	mem       int64
	overrides []string
	speeds    func(context.Context) (hostspeed.Speeds, error) // WithHostSpeeds; nil: the reference host's
	costs     costModel                                       // at the speeds, once Graph asked for them
}

// Option configures a Target; options validate their argument.
type Option func(*Target) error

// WithMemoryBudget sets the budget (bytes) windows are sized to and nodes must fit. Required.
func WithMemoryBudget(bytes int64) Option {
	return func(t *Target) error {
		if bytes <= 0 {
			return fmt.Errorf("build: memory budget %d bytes, want > 0", bytes)
		}
		t.mem = bytes
		return nil
	}
}

// WithOverrides records the --set overrides already applied to the recipe (for provenance).
func WithOverrides(sets []string) Option {
	return func(t *Target) error {
		t.overrides = append([]string(nil), sets...)
		return nil
	}
}

// WithHostSpeeds gives the target the planning host's speeds (hostspeed.Measure, hostspeed.Load),
// asked for when the graph is made (Graph), by which the nodes' modeled costs (engine.Node.Cost)
// are this host's CPU time; without it they are the reference host's (hostspeed.Reference). The
// speeds are not key material: they order the nodes waiting for a job slot and estimate a build's
// time, and never change what a node makes. An error of speeds fails Graph.
func WithHostSpeeds(speeds func(context.Context) (hostspeed.Speeds, error)) Option {
	return func(t *Target) error {
		if speeds == nil {
			return fmt.Errorf("build: WithHostSpeeds(nil)")
		}
		t.speeds = speeds
		return nil
	}
}

// New returns the target of a loaded recipe.
func New(r *recipe.Recipe, opts ...Option) (*Target, error) {
	if r == nil {
		return nil, fmt.Errorf("build: nil recipe")
	}
	t := &Target{r: r, costs: costModel{speed: hostspeed.Reference}}
	for _, o := range opts {
		if err := o(t); err != nil {
			return nil, err
		}
	}
	if t.mem == 0 {
		return nil, fmt.Errorf("build: no memory budget (WithMemoryBudget)")
	}
	return t, nil
}

// Name implements engine.Target: the recipe name.
func (t *Target) Name() string { return t.r.Name }

// Recipe returns the recipe.
func (t *Target) Recipe() *recipe.Recipe { return t.r }

// PlanKey returns the digest of what Graph plans from, besides this binary's code and the files the
// graph reads (its source inputs, whose digests the build memo checks itself: the model, whose
// header Graph reads, the recipe file, the corpus, the texts, a board profile): the recipe with its
// overrides applied, the recipe file's path, the override assignments, the memory budget and
// GOMAXPROCS (stages' memory estimates count workers). It is engine.BuildOptions.Plan: a build
// memo written under it serves a later build with the same key without planning the graph.
//
// The contract that makes that sound: Graph reads no file that is not a source input of the graph
// it returns, and nothing of the environment but GOMAXPROCS (the numerics, which read the
// OpenBLAS variables, are the engine's part of the key). Planning reads only through reads.go's
// seams; the tests check both halves (TestPlanReadsThroughSeams, TestPlanReadsOnlySources), and
// TestPlanSyscallReads traces every file system call of real plans, whoever makes it (ork, stages,
// the standard library, a dependency). Planning that comes to read more must add it here.
func (t *Target) PlanKey() (artifacts.Digest, error) {
	b, err := json.Marshal(struct {
		Recipe     *recipe.Recipe `json:"recipe"`
		Path       string         `json:"path"`
		Overrides  []string       `json:"overrides"`
		Mem        int64          `json:"mem"`
		GOMAXPROCS int            `json:"gomaxprocs"`
	}{t.r, t.r.Path, t.overrides, t.mem, runtime.GOMAXPROCS(0)})
	if err != nil {
		return artifacts.Digest{}, fmt.Errorf("build: the plan key of recipe %q: %w", t.r.Name, err)
	}
	return artifacts.SumBytes(append([]byte("orkpipe build plan key 1\n"), b...)), nil
}

// Outputs names the files a build materializes.
type Outputs struct {
	Pack, Stub, Report, Summary, HTML, Provenance string
}

// Exports returns the export (file) names of the build's outputs.
func (t *Target) Exports() Outputs {
	return Outputs{Pack: t.r.Name + ".orkpack", Stub: t.r.Name + ".orkpack.gguf", Report: "report.json",
		Summary: "summary.txt", HTML: "report.html", Provenance: "provenance.json"}
}

// Roles maps each export name to its role in `build --json`'s summary (pack, stub, report,
// summary, report-html, provenance, routing and residency for an MoE build's routing statistics and
// residency plan, and board-verify when the recipe requires a board verification).
func (t *Target) Roles() map[string]string {
	o := t.Exports()
	roles := map[string]string{o.Pack: "pack", o.Stub: "stub", o.Report: "report", o.Summary: "summary", o.HTML: "report-html", o.Provenance: "provenance",
		RoutingExport: "routing", ResidencyExport: "residency"}
	if t.r.BoardVerify != nil {
		roles[BoardVerifyOutput] = "board-verify"
	}
	return roles
}
