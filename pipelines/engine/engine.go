package engine

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"orkpipe/artifacts"
	"orkpipe/stages"
)

// Engine plans and builds graphs against one store.
type Engine struct {
	store Store
	cfg   config
	// unusable holds the action records already warned about (key and error), so that a record
	// the plan and the build's looks before and after a node's lock all find unusable is reported
	// once (warnUnusable).
	unusable sync.Map
}

// warnUnusable logs, once per engine for a key and error, that an action record cannot be used and
// the node will run.
func (e *Engine) warnUnusable(node string, key artifacts.Digest, err error) {
	if _, seen := e.unusable.LoadOrStore(key.String()+"\x00"+err.Error(), true); seen {
		return
	}
	e.cfg.logger.Warn("action record unusable; the node will run", "node", node, "key", key, "err", err)
}

// New returns an engine on store. WithMemoryBudget is required.
func New(store Store, opts ...Option) (*Engine, error) {
	if store == nil {
		return nil, fmt.Errorf("engine: nil store")
	}
	cfg := config{jobs: 1, sink: Discard, logger: slog.Default(), maxPasses: 3, verifyNotice: time.Second}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.mem == 0 {
		return nil, fmt.Errorf("engine: no memory budget (WithMemoryBudget)")
	}
	if cfg.executor == nil {
		cfg.executor = Local{Store: store, Logger: cfg.logger}
	}
	if cfg.historyDir == "" {
		cfg.historyDir = filepath.Join(store.Dir(), "history")
	}
	return &Engine{store: store, cfg: cfg}, nil
}

// material assembles a node's key material from its inputs: source files through the stat cache,
// node outputs from outputs (the files of a dependency by node index), tools through the stat
// cache. It returns the files to hand to the stage with it.
func (e *Engine) material(ctx context.Context, pn *pnode, outputs func(node int) map[string]stages.File, src *sourceHasher) (stages.KeyMaterial, map[string]stages.File, map[string]stages.File, error) {
	n := pn.node
	numerics, err := stages.Numerics()
	if err != nil {
		return stages.KeyMaterial{}, nil, nil, fmt.Errorf("node %q: %w", n.id, err)
	}
	m := stages.KeyMaterial{
		Numerics: numerics,
		Stage:    n.stage,
		Version:  pn.kind.Version(),
		Params:   pn.bound.Params(),
		Inputs:   make(map[string]artifacts.Digest, len(n.inputs)),
		Tools:    make(map[string]artifacts.Digest, len(pn.spec.Tools)),
	}
	inputs := make(map[string]stages.File, len(n.inputs))
	for name, in := range n.inputs {
		var f stages.File
		if in.node != nil {
			var ok bool
			if f, ok = outputs(in.node.index)[in.output]; !ok {
				return m, nil, nil, fmt.Errorf("node %q: input %q: output %q of node %q is not available", n.id, name, in.output, in.node.id)
			}
		} else {
			obj, err := src.hash(ctx, in.path)
			if err != nil {
				return m, nil, nil, fmt.Errorf("node %q: input %q: source file %s: %w", n.id, name, in.path, err)
			}
			f = stages.File{Path: in.path, Digest: obj.Digest, Size: obj.Size}
		}
		inputs[name] = f
		m.Inputs[name] = f.Digest
	}
	tools := make(map[string]stages.File, len(pn.spec.Tools))
	for _, t := range pn.spec.Tools {
		obj, err := src.hash(ctx, t.Path)
		if err != nil {
			return m, nil, nil, fmt.Errorf("node %q: tool %q: %s: %w", n.id, t.Name, t.Path, err)
		}
		tools[t.Name] = stages.File{Path: t.Path, Digest: obj.Digest, Size: obj.Size}
		m.Tools[t.Name] = obj.Digest
	}
	return m, inputs, tools, nil
}

// recordFiles turns an action record into the node's output files, without their paths (a
// consumer that runs resolves them with Store.Path). A record that does not list exactly the
// stage's outputs is an error (the caller treats it as a miss).
func (e *Engine) recordFiles(pn *pnode, rec artifacts.ActionRecord) (map[string]stages.File, error) {
	if len(rec.Outputs) != len(pn.spec.Outputs) {
		return nil, fmt.Errorf("action record %s lists %d outputs, stage %q declares %d", rec.Key, len(rec.Outputs), pn.node.stage, len(pn.spec.Outputs))
	}
	files := make(map[string]stages.File, len(rec.Outputs))
	for _, o := range rec.Outputs {
		if !hasOutput(pn.spec, o.Name) {
			return nil, fmt.Errorf("action record %s lists output %q, not declared by stage %q", rec.Key, o.Name, pn.node.stage)
		}
		files[o.Name] = stages.File{Digest: o.Digest, Size: o.Size}
	}
	return files, nil
}

// sourceHasher hashes each source path once per pass (through the store's stat cache).
type sourceHasher struct {
	store  Store
	hashed onceGroup[string, artifacts.Object]
}

func newSourceHasher(s Store) *sourceHasher { return &sourceHasher{store: s} }

func (h *sourceHasher) hash(ctx context.Context, path string) (artifacts.Object, error) {
	obj, _, err := h.hashed.do(ctx, path, func() (artifacts.Object, error) { return h.store.HashFile(ctx, path) })
	return obj, err
}
