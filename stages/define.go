package stages

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// Define builds a Kind from a parameter type P and two functions: spec validates the parameters
// and describes the binding; run executes it. Parameters are decoded strictly into P and re-encoded
// canonically, so the key material only ever holds what P can express.
func Define[P any](name string, version int, spec func(P) (Spec, error), run func(context.Context, P, Request) error) Kind {
	return &defined[P]{name: name, version: version, spec: spec, run: run}
}

type defined[P any] struct {
	name    string
	version int
	spec    func(P) (Spec, error)
	run     func(context.Context, P, Request) error
}

func (d *defined[P]) Name() string { return d.name }
func (d *defined[P]) Version() int { return d.version }

func (d *defined[P]) Bind(params []byte) (Bound, error) {
	var p P
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: stage %q: %v", ErrBadParams, d.name, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: stage %q: trailing data after the parameter object", ErrBadParams, d.name)
	}
	spec, err := d.spec(p)
	if err != nil {
		return nil, fmt.Errorf("%w: stage %q: %w", ErrBadParams, d.name, err)
	}
	if err := checkSpec(spec); err != nil {
		return nil, fmt.Errorf("stage %q: %w", d.name, err)
	}
	typed, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%w: stage %q: encoding: %v", ErrBadParams, d.name, err)
	}
	canon, err := Canonicalize(typed)
	if err != nil {
		return nil, fmt.Errorf("%w: stage %q: %v", ErrBadParams, d.name, err)
	}
	return &bound[P]{kind: d, p: p, params: canon, spec: spec}, nil
}

type bound[P any] struct {
	kind   *defined[P]
	p      P
	params json.RawMessage
	spec   Spec
}

func (b *bound[P]) Params() json.RawMessage { return b.params }
func (b *bound[P]) Spec() Spec              { return b.spec }
func (b *bound[P]) Run(ctx context.Context, req Request) error {
	return b.kind.run(ctx, b.p, req)
}

// checkSpec rejects specs that cannot be executed safely: duplicate or path-like names and a
// missing memory estimate.
func checkSpec(s Spec) error {
	if s.PeakMemory <= 0 {
		return fmt.Errorf("spec: peak memory estimate %d, want > 0", s.PeakMemory)
	}
	for _, group := range []struct {
		what  string
		names []string
	}{{"input", s.Inputs}, {"output", s.Outputs}} {
		seen := map[string]bool{}
		for _, n := range group.names {
			if err := checkName(n); err != nil {
				return fmt.Errorf("spec: %s %w", group.what, err)
			}
			if seen[n] {
				return fmt.Errorf("spec: %s %q declared twice", group.what, n)
			}
			seen[n] = true
		}
	}
	if len(s.Outputs) == 0 {
		return fmt.Errorf("spec: no outputs declared")
	}
	tools := map[string]bool{}
	for _, t := range s.Tools {
		if err := checkName(t.Name); err != nil {
			return fmt.Errorf("spec: tool %w", err)
		}
		if t.Path == "" || tools[t.Name] {
			return fmt.Errorf("spec: tool %q has no path or is declared twice", t.Name)
		}
		tools[t.Name] = true
	}
	return nil
}

// checkName accepts names usable as a single file name: non-empty, no separators, not "." or "..".
func checkName(n string) error {
	if n == "" || n == "." || n == ".." || len(n) > 200 {
		return fmt.Errorf("name %q: want a non-empty file name", n)
	}
	for _, c := range n {
		if c == '/' || c == '\\' || c == 0 {
			return fmt.Errorf("name %q: contains %q", n, c)
		}
	}
	return nil
}
