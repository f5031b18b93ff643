package engine

import (
	"sync"
	"time"
)

// Event kinds. They are part of the CLI's JSON Lines contract (docs/cli.md).
const (
	EventPlan          = "plan"           // one per node before the build starts
	EventNodeCached    = "node_cached"    // the node's outputs came from the action cache
	EventNodeVerifying = "node_verifying" // the node is still verifying its input objects (WithVerifyNotice)
	EventNodeStarted   = "node_started"   // the node's stage started
	EventNodeFinished  = "node_finished"  // the node's stage finished and its outputs are stored
	EventNodeFailed    = "node_failed"    // the node's stage (or storing its outputs) failed
	EventSummary       = "summary"        // the last event of a build
)

// Event is one build event. Node events carry Node and Key (Key is empty in plan events of nodes
// whose key depends on outputs not yet built); the summary carries Summary.
type Event struct {
	Event      string            `json:"event"`
	Node       string            `json:"node"`
	Key        string            `json:"key"`
	Stage      string            `json:"stage,omitempty"`
	Time       time.Time         `json:"time"`
	Mem        int64             `json:"mem,omitempty"`         // plan: declared peak memory in bytes
	Writes     int64             `json:"writes,omitempty"`      // plan: estimated bytes of its outputs in the store (Node.Writes)
	CostNS     int64             `json:"cost_ns,omitempty"`     // plan: estimated CPU time of its run, ns of one core of the planning host (Node.Cost)
	Deps       []string          `json:"deps,omitempty"`        // plan: ids of the nodes it consumes
	SameAs     string            `json:"same_as,omitempty"`     // node_cached: node with identical key material
	Checked    bool              `json:"checked,omitempty"`     // node_started, node_finished: a cached node run again by --check
	Bytes      int64             `json:"bytes,omitempty"`       // node_verifying: the input objects' total size
	DurationMS int64             `json:"duration_ms,omitempty"` // node_finished, node_failed
	Outputs    map[string]string `json:"outputs,omitempty"`     // node_cached, node_finished: output -> digest
	Error      string            `json:"error,omitempty"`       // node_failed
	Summary    *Summary          `json:"-"`
}

// Summary closes a build: counts of nodes by outcome (they sum to the number of nodes), the
// duration and each export's materialized path (or digest if none was materialized).
type Summary struct {
	Event      string            `json:"event"` // always "summary"
	Target     string            `json:"target"`
	Executed   int               `json:"executed"`
	Checked    int               `json:"checked,omitempty"` // of executed: cached nodes run again by --check that reproduced their record
	Cached     int               `json:"cached"`
	Failed     int               `json:"failed"`
	Skipped    int               `json:"skipped"`
	DurationMS int64             `json:"duration_ms"`
	Outputs    map[string]string `json:"outputs"`
	Error      string            `json:"error,omitempty"`
}

// Sink receives build events. Emit is called from many goroutines; implementations serialize.
type Sink interface {
	Emit(Event)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(Event)

// Emit calls f(e).
func (f SinkFunc) Emit(e Event) { f(e) }

// Discard drops every event.
var Discard Sink = SinkFunc(func(Event) {})

// Recorder is a Sink that keeps every event, for tests and tools.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Emit records e.
func (r *Recorder) Emit(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the recorded events.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}
