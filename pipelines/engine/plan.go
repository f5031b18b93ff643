package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"orkpipe/artifacts"
	"orkpipe/internal/units"
	"orkpipe/stages"
)

// Plan is a validated graph: every node bound to its stage kind with canonical params, every
// input matched to the stage's declared inputs, every node within the memory budget.
type Plan struct {
	graph *Graph
	nodes []*pnode
	// exports resolved to (node index, output name).
	exports []pexport
}

type pnode struct {
	node       *Node
	kind       stages.Kind
	bound      stages.Bound
	spec       stages.Spec
	deps       []int // indices of distinct nodes whose outputs this node consumes
	dependents []int
}

type pexport struct {
	name   string
	node   int
	output string
}

// Plan validates g against the registered stage kinds and the memory budget. It runs nothing and
// reads nothing but the graph. A node whose declared peak memory exceeds the budget is an error
// wrapping ErrOverBudget that names the node.
func (e *Engine) Plan(g *Graph) (*Plan, error) {
	if err := g.Err(); err != nil {
		return nil, err
	}
	if len(g.nodes) == 0 {
		return nil, fmt.Errorf("%w: the graph has no nodes", ErrGraph)
	}
	p := &Plan{graph: g, nodes: make([]*pnode, len(g.nodes))}
	var errs []error
	downstream := 0
	for i, n := range g.nodes {
		pn, err := e.planNode(p, n)
		switch {
		case errors.Is(err, errDownstream):
			downstream++
		case err != nil:
			errs = append(errs, err)
		default:
			p.nodes[i] = pn
		}
	}
	if len(errs) > 0 {
		// The nodes after an invalid one are named once, in a count: a line each buried the cause
		// under thousands of lines at a 27B model's scale.
		if downstream > 0 {
			errs = append(errs, fmt.Errorf("%d more nodes not planned: they read what the nodes above make", downstream))
		}
		return nil, errors.Join(errs...)
	}
	seen := map[string]bool{}
	for _, x := range g.exports {
		if err := checkFileName(x.Name); err != nil || seen[x.Name] {
			return nil, fmt.Errorf("%w: export %q: want a unique file name", ErrGraph, x.Name)
		}
		seen[x.Name] = true
		if !hasOutput(p.nodes[x.From.node.index].spec, x.From.output) {
			return nil, fmt.Errorf("%w: export %q: node %q (stage %q) has no output %q (it has %v)", ErrGraph, x.Name, x.From.node.id, x.From.node.stage, x.From.output, p.nodes[x.From.node.index].spec.Outputs)
		}
		p.exports = append(p.exports, pexport{name: x.Name, node: x.From.node.index, output: x.From.output})
	}
	return p, nil
}

func (e *Engine) planNode(p *Plan, n *Node) (*pnode, error) {
	kind, err := stages.Lookup(n.stage)
	if err != nil {
		return nil, fmt.Errorf("%w: node %q: %w", ErrGraph, n.id, err)
	}
	raw, err := n.paramsJSON()
	if err != nil {
		return nil, fmt.Errorf("%w: node %q: encoding params: %v", ErrGraph, n.id, err)
	}
	b, err := kind.Bind(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: node %q: %w", ErrGraph, n.id, err)
	}
	spec := b.Spec()
	if spec.PeakMemory > e.cfg.mem {
		return nil, fmt.Errorf("%w: node %q (stage %q) declares a peak memory of %s, above the budget of %s (--mem)",
			ErrOverBudget, n.id, n.stage, units.FormatSize(spec.PeakMemory), units.FormatSize(e.cfg.mem))
	}
	want := append([]string(nil), spec.Inputs...)
	sort.Strings(want)
	got := n.inputNames()
	if fmt.Sprint(want) != fmt.Sprint(got) {
		return nil, fmt.Errorf("%w: node %q (stage %q): inputs %v bound, the stage takes %v", ErrGraph, n.id, n.stage, got, want)
	}
	pn := &pnode{node: n, kind: kind, bound: b, spec: spec}
	depSeen := map[int]bool{}
	for _, name := range got {
		in := n.inputs[name]
		if in.node == nil {
			continue
		}
		src := p.nodes[in.node.index]
		if src == nil { // its own error is Plan's
			return nil, fmt.Errorf("%w: node %q: input %q comes from node %q, which is invalid", errDownstream, n.id, name, in.node.id)
		}
		if !hasOutput(src.spec, in.output) {
			return nil, fmt.Errorf("%w: node %q: input %q names output %q of node %q (stage %q), which has outputs %v", ErrGraph, n.id, name, in.output, in.node.id, in.node.stage, src.spec.Outputs)
		}
		if !depSeen[in.node.index] {
			depSeen[in.node.index] = true
			pn.deps = append(pn.deps, in.node.index)
			src.dependents = append(src.dependents, n.index)
		}
	}
	return pn, nil
}

func hasOutput(s stages.Spec, name string) bool {
	for _, o := range s.Outputs {
		if o == name {
			return true
		}
	}
	return false
}

func checkFileName(n string) error {
	if n == "" || n == "." || n == ".." {
		return fmt.Errorf("empty file name")
	}
	for _, c := range n {
		if c == '/' || c == 0 {
			return fmt.Errorf("file name %q contains %q", n, c)
		}
	}
	return nil
}

// NodeStatus is the planned state of one node (see Engine.Status).
type NodeStatus struct {
	ID     string `json:"node"`
	Stage  string `json:"stage"`
	Key    string `json:"key"`    // "" while it depends on outputs not built yet
	Cached bool   `json:"cached"` // an action record with intact outputs exists
	// Remote: cached in the remote cache only (PeekStore): its record was read from there, its
	// outputs not downloaded; the build downloads them (RemoteBytes).
	Remote      bool                `json:"remote,omitempty"`
	RemoteBytes int64               `json:"remote_bytes,omitempty"` // a remote node's recorded output bytes
	Mem         int64               `json:"mem"`                    // declared peak memory in bytes
	Writes      int64               `json:"writes,omitempty"`       // estimated bytes of its outputs in the store (Node.Writes)
	CostNS      int64               `json:"cost_ns,omitempty"`      // estimated CPU time of its run, ns of one core of the planning host (Node.Cost)
	Deps        []string            `json:"deps,omitempty"`         // ids of the nodes it consumes
	Material    *stages.KeyMaterial `json:"material,omitempty"`     // nil while the key is unknown
	SameAs      string              `json:"same_as,omitempty"`      // an earlier node with identical key material
	// Exports maps the graph's exports this node delivers to the outputs they are (export name ->
	// output name).
	Exports map[string]string `json:"exports,omitempty"`
	// Files are a cached node's outputs in the store (read-only paths), by output name (nil when not
	// cached).
	Files map[string]stages.File `json:"-"`
}

// Status computes, without running anything, each node's key wherever it can be known (its inputs
// are source files or outputs of cached nodes) and whether it is cached. Source files are hashed
// through the store's stat cache. With a PeekStore, a node the remote cache holds is cached (Remote)
// with only its record fetched: planning downloads no output.
func (e *Engine) Status(ctx context.Context, p *Plan) ([]NodeStatus, error) {
	out := make([]NodeStatus, len(p.nodes))
	outputs := make([]map[string]stages.File, len(p.nodes))
	byKey := map[artifacts.Digest]string{}
	sources := newSourceHasher(e.store)
	for i, pn := range p.nodes {
		st := NodeStatus{ID: pn.node.id, Stage: pn.node.stage, Mem: pn.spec.PeakMemory, Writes: pn.node.writes, CostNS: pn.node.cost}
		for _, d := range pn.deps {
			st.Deps = append(st.Deps, p.nodes[d].node.id)
		}
		out[i] = st
		known := true
		for _, d := range pn.deps {
			if outputs[d] == nil {
				known = false
			}
		}
		if !known {
			continue
		}
		m, _, _, err := e.material(ctx, pn, func(d int) map[string]stages.File { return outputs[d] }, sources)
		if err != nil {
			return nil, err
		}
		key, err := m.Key()
		if err != nil {
			return nil, fmt.Errorf("node %q: %w", pn.node.id, err)
		}
		out[i].Key, out[i].Material = key.String(), &m
		if first, dup := byKey[key]; dup {
			out[i].SameAs = first
		} else {
			byKey[key] = pn.node.id
		}
		rec, remote, err := e.peekAction(ctx, key)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
			if !errors.Is(err, artifacts.ErrNotFound) {
				e.warnUnusable(pn.node.id, key, err)
			}
			continue
		}
		files, err := e.recordFiles(pn, rec)
		if err != nil {
			continue // outputs unusable: a miss
		}
		out[i].Cached, outputs[i] = true, files
		if remote {
			out[i].Remote = true
			for _, o := range rec.Outputs {
				out[i].RemoteBytes += o.Size
			}
			continue // its outputs are not (all) local: no Files
		}
		out[i].Files = make(map[string]stages.File, len(files))
		for name, f := range files {
			if f.Path, err = e.store.Path(ctx, f.Digest); err == nil {
				out[i].Files[name] = f
			}
		}
	}
	for _, x := range p.exports {
		if out[x.node].Exports == nil {
			out[x.node].Exports = map[string]string{}
		}
		out[x.node].Exports[x.name] = x.output
	}
	return out, nil
}

// peekAction looks key up as Status does: through PeekStore when the store has it (remote true for
// a record only the remote cache holds, its outputs not downloaded), else GetAction.
func (e *Engine) peekAction(ctx context.Context, key artifacts.Digest) (rec artifacts.ActionRecord, remote bool, err error) {
	if ps, ok := e.store.(PeekStore); ok {
		return ps.PeekAction(ctx, key)
	}
	rec, err = e.store.GetAction(ctx, key)
	return rec, false, err
}
