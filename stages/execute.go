package stages

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"orkpipe/artifacts"
)

// Bind looks up the kind named by m, binds its params and checks that they are the canonical
// params of that kind and that m names exactly the inputs and tools the binding declares.
func Bind(m KeyMaterial) (Bound, error) {
	k, err := Lookup(m.Stage)
	if err != nil {
		return nil, err
	}
	if k.Version() != m.Version {
		return nil, fmt.Errorf("%w: stage %q: version %d, this binary implements version %d", ErrBadKeyMaterial, m.Stage, m.Version, k.Version())
	}
	b, err := k.Bind(m.Params)
	if err != nil {
		return nil, err
	}
	if string(b.Params()) != string(m.Params) {
		return nil, fmt.Errorf("%w: stage %q: params %s are not the canonical %s", ErrBadKeyMaterial, m.Stage, m.Params, b.Params())
	}
	spec := b.Spec()
	if err := sameNames("inputs", keys(m.Inputs), spec.Inputs); err != nil {
		return nil, fmt.Errorf("%w: stage %q: %v", ErrBadKeyMaterial, m.Stage, err)
	}
	var tools []string
	for _, t := range spec.Tools {
		tools = append(tools, t.Name)
	}
	if err := sameNames("tools", keys(m.Tools), tools); err != nil {
		return nil, fmt.Errorf("%w: stage %q: %v", ErrBadKeyMaterial, m.Stage, err)
	}
	return b, nil
}

// Execute runs the node described by m: it binds the kind (Bind), checks that every input and
// tool file carries the digest the key material names, runs the stage into outDir (which must
// exist and be empty) and checks that outDir then holds exactly the declared outputs as regular
// files. It returns the output names in spec order. Both the engine's local executor and
// `orkpipe node exec` call it; it is the only way a stage runs.
func Execute(ctx context.Context, m KeyMaterial, inputs, tools map[string]File, outDir string, logger *slog.Logger) ([]string, error) {
	b, err := Bind(m)
	if err != nil {
		return nil, err
	}
	if n, err := Numerics(); err != nil {
		return nil, fmt.Errorf("stage %q: %w", m.Stage, err)
	} else if n != m.Numerics {
		return nil, fmt.Errorf("%w: stage %q: numerics %q, this binary computes with %q (a -tags blas build and a pure-Go one, or OpenBLAS with another library, kernel set or thread count, make other float results)", ErrBadKeyMaterial, m.Stage, m.Numerics, n)
	}
	for what, pair := range map[string]struct {
		want map[string]File
		key  map[string]artifacts.Digest
	}{"input": {inputs, m.Inputs}, "tool": {tools, m.Tools}} {
		if len(pair.want) != len(pair.key) {
			return nil, fmt.Errorf("%w: stage %q: %d %s files for %d %ss in the key material", ErrBadInputs, m.Stage, len(pair.want), what, len(pair.key), what)
		}
		for name, d := range pair.key {
			f, ok := pair.want[name]
			if !ok {
				return nil, fmt.Errorf("%w: stage %q: %s %q missing", ErrBadInputs, m.Stage, what, name)
			}
			if f.Digest != d {
				return nil, fmt.Errorf("%w: stage %q: %s %q is %s (%s), key material says %s", ErrBadInputs, m.Stage, what, name, f.Digest, f.Path, d)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	req := Request{Inputs: inputs, Tools: tools, OutDir: outDir, Logger: logger.With("stage", m.Stage)}
	if err := b.Run(ctx, req); err != nil {
		return nil, fmt.Errorf("stage %q: %w", m.Stage, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	outs := b.Spec().Outputs
	ents, err := os.ReadDir(outDir)
	if err != nil {
		return nil, fmt.Errorf("stage %q: reading its output directory: %w", m.Stage, err)
	}
	var got []string
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%w: stage %q: %s is not a regular file", ErrBadOutputs, m.Stage, filepath.Join(outDir, e.Name()))
		}
		got = append(got, e.Name())
	}
	if err := sameNames("outputs", got, outs); err != nil {
		return nil, fmt.Errorf("%w: stage %q: %v", ErrBadOutputs, m.Stage, err)
	}
	return outs, nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// sameNames reports, if got and want differ as sets, which names are missing and which unexpected.
func sameNames(what string, got, want []string) error {
	g, w := map[string]bool{}, map[string]bool{}
	for _, n := range got {
		g[n] = true
	}
	for _, n := range want {
		w[n] = true
	}
	var missing, extra []string
	for n := range w {
		if !g[n] {
			missing = append(missing, n)
		}
	}
	for n := range g {
		if !w[n] {
			extra = append(extra, n)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return nil
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return fmt.Errorf("%s: missing [%s], unexpected [%s]", what, strings.Join(missing, " "), strings.Join(extra, " "))
}
