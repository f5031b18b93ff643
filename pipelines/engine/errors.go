package engine

import "errors"

// Sentinel errors of the engine; returned errors wrap them with the node, key, path or field.
var (
	// ErrGraph: the graph is malformed (duplicate node id, unknown stage, bad params, an input
	// that names a missing output, an export that is not a node output, ...).
	ErrGraph = errors.New("invalid graph")
	// ErrOverBudget: a node's declared peak memory exceeds the memory budget; found at plan time.
	ErrOverBudget = errors.New("node does not fit the memory budget")
	// ErrNodeFailed: a node's run failed (wrapped once per failed node, with its id and key).
	ErrNodeFailed = errors.New("node failed")
	// errDownstream (not returned): a node not planned because an input comes from a node that is
	// not; Plan counts such nodes in one line instead of naming each.
	errDownstream = errors.New("input from an invalid node")
	// ErrSkipped: nodes were not run because a dependency failed or the build stopped.
	ErrSkipped = errors.New("nodes skipped")
	// ErrNoHistory: no build of the target has been recorded (explain).
	ErrNoHistory = errors.New("no recorded build")
	// ErrSourceChanged: a source file changed while a node read it.
	ErrSourceChanged = errors.New("source file changed during the build")
	// ErrNotReproducible: a node run again under BuildOptions.Check made outputs other than its
	// action record's under the same key (a stage whose output changed without a version bump, or
	// one that is not deterministic).
	ErrNotReproducible = errors.New("node output differs from its cached record under the same key")
)
