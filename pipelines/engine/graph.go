package engine

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
)

// Graph is a DAG of nodes under construction. Nodes are added in dependency order: an input can
// only name an output of a node already added, so a Graph is acyclic by construction and its
// insertion order is a topological order. Errors found while adding are collected and reported by
// Err and by Engine.Plan.
type Graph struct {
	nodes   []*Node
	byID    map[string]*Node
	exports []Export
	errs    []error
}

// Node is one stage invocation in a Graph.
type Node struct {
	graph  *Graph
	index  int
	id     string
	stage  string
	params any
	inputs map[string]Input
	cost   int64 // estimated CPU time of one run in ns of one core (Cost); 0: not estimated
	writes int64 // estimated bytes of its outputs in the store (Writes); 0: small or not estimated
}

// Input is what one named input of a node is bound to: a source file by path, or an output of
// another node.
type Input struct {
	path   string
	node   *Node
	output string
}

// Export names a node output that is a result of the graph: it is materialized as Name in the
// output directory and pinned under the target name.
type Export struct {
	Name string
	From Input
}

// NewGraph returns an empty graph.
func NewGraph() *Graph { return &Graph{byID: map[string]*Node{}} }

// File binds an input to a source file. The path is made absolute; its content digest comes
// from the store's stat cache at build time.
func File(path string) Input {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return Input{path: path}
}

// Output binds an input to output name of n.
func (n *Node) Output(name string) Input { return Input{node: n, output: name} }

// Cost sets the node's estimated CPU time of one run, in nanoseconds of one core (the graph's maker
// says of which host: pipelines/build's cost model gives the planning host's, from a reference
// host's rates and this host's measured speeds). It orders the
// nodes waiting for a job slot (a node after which more estimated work must follow, one node after
// another, goes first), and plan and build events carry it (NodeStatus.CostNS, Event.CostNS) for
// estimates of nodes no earlier build has timed (progress.ETA). It is not key material, and a node
// left without one counts 0. A negative cost is a graph error.
func (n *Node) Cost(ns int64) *Node {
	if ns < 0 {
		n.graph.errs = append(n.graph.errs, fmt.Errorf("%w: node %q: cost %d ns, want >= 0", ErrGraph, n.id, ns))
		return n
	}
	n.cost = ns
	return n
}

// Writes sets the estimated size in bytes of the node's outputs as stored (the blocks they take:
// a file's holes count nothing), which plan and build sum over the nodes not cached to check the
// cache's free space before anything runs. Like Cost it is not key material; a node left without one
// counts 0 (outputs of a few MiB at most). A negative size is a graph error.
func (n *Node) Writes(bytes int64) *Node {
	if bytes < 0 {
		n.graph.errs = append(n.graph.errs, fmt.Errorf("%w: node %q: writes %d bytes, want >= 0", ErrGraph, n.id, bytes))
		return n
	}
	n.writes = bytes
	return n
}

// ID returns the node's id, unique in its graph.
func (n *Node) ID() string { return n.id }

// Stage returns the stage kind name.
func (n *Node) Stage() string { return n.stage }

// String describes the input ("file /abs/path" or "<node>.<output>").
func (in Input) String() string {
	if in.node != nil {
		return in.node.id + "." + in.output
	}
	return "file " + in.path
}

// Add appends a node running stage with params (a typed struct, or json.RawMessage) and inputs.
// Problems are recorded and reported by Err. The graph keeps inputs and never modifies it, so
// nodes with the same inputs may share one map (which the caller then leaves alone too).
func (g *Graph) Add(id, stage string, params any, inputs map[string]Input) *Node {
	n := &Node{graph: g, index: len(g.nodes), id: id, stage: stage, params: params, inputs: inputs}
	switch {
	case id == "":
		g.errs = append(g.errs, fmt.Errorf("%w: node %d (stage %q) has an empty id", ErrGraph, n.index, stage))
	case g.byID[id] != nil:
		g.errs = append(g.errs, fmt.Errorf("%w: node id %q used twice", ErrGraph, id))
	}
	for name, in := range inputs {
		switch {
		case in.node == nil && in.path == "":
			g.errs = append(g.errs, fmt.Errorf("%w: node %q: input %q is bound to nothing", ErrGraph, id, name))
		case in.node != nil && in.node.graph != g:
			g.errs = append(g.errs, fmt.Errorf("%w: node %q: input %q names node %q of another graph", ErrGraph, id, name, in.node.id))
		}
	}
	g.nodes = append(g.nodes, n)
	if id != "" && g.byID[id] == nil {
		g.byID[id] = n
	}
	return n
}

// Export declares a result of the graph, materialized under name.
func (g *Graph) Export(name string, from Input) {
	if from.node == nil {
		g.errs = append(g.errs, fmt.Errorf("%w: export %q: must be a node output, got %s", ErrGraph, name, from))
	}
	g.exports = append(g.exports, Export{Name: name, From: from})
}

// Nodes returns the nodes in insertion (topological) order.
func (g *Graph) Nodes() []*Node { return g.nodes }

// SourceFiles returns the path of every file that is an input of a node (not another node's
// output), each once, in the order the nodes first name them (by node, then input name).
func (g *Graph) SourceFiles() []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range g.nodes {
		for _, name := range n.inputNames() {
			if in := n.inputs[name]; in.node == nil && !seen[in.path] {
				seen[in.path] = true
				out = append(out, in.path)
			}
		}
	}
	return out
}

// Exports returns the declared results.
func (g *Graph) Exports() []Export { return g.exports }

// Node returns the node with the given id, or nil.
func (g *Graph) Node(id string) *Node { return g.byID[id] }

// Err returns the first problem recorded while building the graph.
func (g *Graph) Err() error {
	if len(g.errs) > 0 {
		return g.errs[0]
	}
	return nil
}

// paramsJSON encodes the node's params for binding.
func (n *Node) paramsJSON() ([]byte, error) {
	switch p := n.params.(type) {
	case json.RawMessage:
		return p, nil
	case []byte:
		return p, nil
	case nil:
		return []byte("{}"), nil
	default:
		return json.Marshal(p)
	}
}

// inputNames returns the node's input names, sorted.
func (n *Node) inputNames() []string {
	names := make([]string, 0, len(n.inputs))
	for k := range n.inputs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
