package executortest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

// Request builds the ExecRequest of stage (version 1) with canonical params over inputs.
func Request(t testing.TB, stage, params string, inputs map[string]stages.File) engine.ExecRequest {
	t.Helper()
	return request(t, stage, params, inputs)
}

// Numerics is this build's stages.Numerics, which key material must name for an executor to run it
// ("" for the pure-Go build, the OpenBLAS configuration for a -tags blas one).
func Numerics(t testing.TB) string {
	t.Helper()
	n, err := stages.Numerics()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// request builds the ExecRequest of stage with canonical params over inputs.
func request(t testing.TB, stage, params string, inputs map[string]stages.File) engine.ExecRequest {
	t.Helper()
	m := stages.KeyMaterial{Stage: stage, Version: 1, Params: []byte(params), Inputs: map[string]artifacts.Digest{}, Numerics: Numerics(t)}
	for name, f := range inputs {
		m.Inputs[name] = f.Digest
	}
	return engine.ExecRequest{Key: mustKey(t, m), Material: m, Inputs: inputs, Tools: map[string]stages.File{}}
}

func mustKey(t testing.TB, m stages.KeyMaterial) artifacts.Digest {
	t.Helper()
	k, err := m.Key()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// reference runs req in process through stages.Execute and returns its outputs' digests.
func reference(t *testing.T, req engine.ExecRequest) []artifacts.NamedObject {
	t.Helper()
	ctx := context.Background()
	out := t.TempDir()
	names, err := stages.Execute(ctx, req.Material, req.Inputs, req.Tools, out, nil)
	if err != nil {
		t.Fatalf("in-process reference of %s: %v", req.Material.Stage, err)
	}
	var objs []artifacts.NamedObject
	for _, n := range names {
		o, err := artifacts.HashPath(ctx, filepath.Join(out, n))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, artifacts.NamedObject{Name: n, Digest: o.Digest, Size: o.Size})
	}
	return objs
}

func writeFile(t *testing.T, s string) stages.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "input")
	if err := os.WriteFile(p, []byte(s), 0o444); err != nil {
		t.Fatal(err)
	}
	return stages.File{Path: p, Digest: artifacts.SumBytes([]byte(s)), Size: int64(len(s))}
}

func sameObjects(a, b []artifacts.NamedObject) bool { return slices.Equal(a, b) }
