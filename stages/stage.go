// Package stages defines what a stage kind is and holds the registry of every kind orkpipe knows.
//
// A stage kind is a deterministic function from named input files plus parameters to named output
// files. Its description is split, as in BuildKit's solver, into key material and execution:
//
//   - key material (KeyMaterial): the stage name, its version, its canonical parameters, the digest of
//     every input artifact by input name and the digest of every external tool it runs. The BLAKE3 of
//     its canonical JSON is the node key. Nothing else may influence the outputs.
//   - execution (Bound.Run): given the inputs as read-only files (path + digest; read them with
//     ReaderAt, never whole into memory) and an output directory, write one file per declared output.
//
// Kinds register themselves by name (Register, usually from an init function), so that a node can be
// executed from its key material alone (Execute): the local executor of the engine and `orkpipe node
// exec` in a container go through the same code path. Adding a stage kind is one file in this package:
// a parameter struct, a Spec function and a Run function passed to Define.
//
// Version must be bumped whenever a kind's output for the same inputs and parameters changes.
package stages

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"

	"orkpipe/artifacts"
)

// File is one artifact handed to a running stage: a read-only file, its digest and its size.
type File struct {
	Path   string           `json:"path"`
	Digest artifacts.Digest `json:"digest"`
	Size   int64            `json:"size"`
}

// Tool names an external program a stage runs. The engine hashes Path (through the store's stat
// cache) and makes the digest key material; the running stage gets it back in Request.Tools.
type Tool struct {
	Name string
	Path string
}

// Spec is the static description of a bound stage: what it consumes and produces and what it costs.
type Spec struct {
	Inputs     []string // input names; a node must bind exactly these
	Outputs    []string // output names; each is written as a file of that name in the output directory
	PeakMemory int64    // estimate of the peak resident memory of one run, in bytes; must be > 0
	Tools      []Tool   // external programs the run executes
}

// Request is what Run gets: its inputs, its tools and the directory to write its outputs into.
type Request struct {
	Inputs map[string]File // by input name; read-only
	Tools  map[string]File // by tool name; digest-checked against the key material
	OutDir string          // empty directory on the store's filesystem; write exactly Spec.Outputs here
	Logger *slog.Logger
}

// Output returns the path Run must write output name to.
func (r Request) Output(name string) string { return filepath.Join(r.OutDir, name) }

// Bound is a stage kind bound to validated parameters.
type Bound interface {
	// Params returns the canonical JSON of the parameters (the key material's "params").
	Params() json.RawMessage
	// Spec returns the inputs, outputs, memory estimate and tools of this binding.
	Spec() Spec
	// Run executes the stage. It must honour ctx and write only inside req.OutDir.
	Run(ctx context.Context, req Request) error
}

// Kind is a registered stage kind.
type Kind interface {
	Name() string
	// Version is bumped whenever the output for the same inputs and parameters changes.
	Version() int
	// Bind decodes params strictly (unknown fields and trailing data are errors), validates them
	// and returns the bound stage.
	Bind(params []byte) (Bound, error)
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Kind{}
)

// Register adds a kind to the registry. It panics on an empty name, a version below 1 or a name
// registered twice: these are programming errors found at start-up.
func Register(k Kind) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if k.Name() == "" {
		panic("stages: Register with an empty name")
	}
	if k.Version() < 1 {
		panic(fmt.Sprintf("stages: kind %q has version %d, want >= 1", k.Name(), k.Version()))
	}
	if _, dup := registry[k.Name()]; dup {
		panic(fmt.Sprintf("stages: kind %q registered twice", k.Name()))
	}
	registry[k.Name()] = k
}

// Lookup returns the kind registered under name, or an error wrapping ErrUnknownStage.
func Lookup(name string) (Kind, error) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	k, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownStage, name, namesLocked())
	}
	return k, nil
}

// Names returns the names of every registered kind, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return namesLocked()
}

func namesLocked() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
