package stages_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/stages"
)

func TestBindIsStrict(t *testing.T) {
	k, err := stages.Lookup("demo-generate")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, params, want string }{
		{"unknown field", `{"seed":1,"size":10,"sise":3}`, "unknown field"},
		{"wrong type", `{"seed":"1","size":10}`, "cannot unmarshal"},
		{"trailing data", `{"seed":1,"size":10}{}`, "trailing"},
		{"validation", `{"seed":1,"size":0}`, `"size"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := k.Bind([]byte(tc.params))
			if !errors.Is(err, stages.ErrBadParams) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "demo-generate") {
				t.Errorf("err %v, want ErrBadParams naming the stage and %q", err, tc.want)
			}
		})
	}
	b, err := k.Bind([]byte(`{"size": 10, "seed": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b.Params()); got != `{"seed":7,"size":10}` {
		t.Errorf("canonical params %s", got)
	}
	if _, err := stages.Lookup("no-such-stage"); !errors.Is(err, stages.ErrUnknownStage) {
		t.Errorf("Lookup of an unknown kind: %v", err)
	}
}

// writeInput stores s as a file and returns it as a stage input.
func writeInput(t *testing.T, s string) stages.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(p, []byte(s), 0o444); err != nil {
		t.Fatal(err)
	}
	return stages.File{Path: p, Digest: artifacts.SumBytes([]byte(s)), Size: int64(len(s))}
}

func TestExecuteChecksInputsAndOutputs(t *testing.T) {
	ctx := context.Background()
	in := writeInput(t, "hello")
	m := stages.KeyMaterial{Stage: "demo-xor", Version: 1, Params: []byte(`{"key":1}`), Inputs: map[string]artifacts.Digest{"in": in.Digest},
		Numerics: ownNumerics(t)}

	out := t.TempDir()
	names, err := stages.Execute(ctx, m, map[string]stages.File{"in": in}, nil, out, nil)
	if err != nil || len(names) != 1 || names[0] != "out" {
		t.Fatalf("Execute: %v %v", names, err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "out")); string(b) != "idmmn" {
		t.Errorf("demo-xor of hello with key 1 = %q", b)
	}

	wrong := in
	wrong.Digest = artifacts.SumBytes([]byte("other"))
	if _, err := stages.Execute(ctx, m, map[string]stages.File{"in": wrong}, nil, t.TempDir(), nil); !errors.Is(err, stages.ErrBadInputs) {
		t.Errorf("input with another digest: %v, want ErrBadInputs", err)
	}
	if _, err := stages.Execute(ctx, m, map[string]stages.File{}, nil, t.TempDir(), nil); !errors.Is(err, stages.ErrBadInputs) {
		t.Errorf("missing input: %v, want ErrBadInputs", err)
	}
	extra := m
	extra.Inputs = map[string]artifacts.Digest{"in": in.Digest, "more": in.Digest}
	if _, err := stages.Execute(ctx, extra, map[string]stages.File{"in": in, "more": in}, nil, t.TempDir(), nil); !errors.Is(err, stages.ErrBadKeyMaterial) {
		t.Errorf("key material naming an input the stage does not take: %v, want ErrBadKeyMaterial", err)
	}
	old := m
	old.Version = 9
	if _, err := stages.Execute(ctx, old, map[string]stages.File{"in": in}, nil, t.TempDir(), nil); !errors.Is(err, stages.ErrBadKeyMaterial) {
		t.Errorf("other stage version: %v, want ErrBadKeyMaterial", err)
	}
	dirty := t.TempDir()
	os.WriteFile(filepath.Join(dirty, "stray"), []byte("x"), 0o644)
	if _, err := stages.Execute(ctx, m, map[string]stages.File{"in": in}, nil, dirty, nil); !errors.Is(err, stages.ErrBadOutputs) {
		t.Errorf("an undeclared file in the output dir: %v, want ErrBadOutputs", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := stages.Execute(canceled, m, map[string]stages.File{"in": in}, nil, t.TempDir(), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}
}

// TestExecuteRefusesOtherNumerics: key material names the arithmetic that computed its outputs
// (stages.Numerics: "" for the pure-Go build, omitted from the canonical JSON); Execute runs only
// material of this binary's numerics, and the field changes the key.
func TestExecuteRefusesOtherNumerics(t *testing.T) {
	own, err := stages.Numerics()
	if err != nil {
		t.Fatal(err)
	}
	m := stages.KeyMaterial{Stage: "demo-generate", Version: 1, Params: []byte(`{"seed":1,"size":16}`), Numerics: own}
	canon, err := m.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if has := strings.Contains(string(canon), `"numerics"`); has != (own != "") {
		t.Errorf("canonical material %s: numerics spelled %v, this binary's numerics %q", canon, has, own)
	}
	other := m
	other.Numerics = own + "openblas Haswell blake3:00"
	k1, _ := m.Key()
	k2, _ := other.Key()
	if k1 == k2 {
		t.Errorf("numerics %q and %q give the same key", m.Numerics, other.Numerics)
	}
	if _, err := stages.Execute(context.Background(), other, nil, nil, t.TempDir(), nil); !errors.Is(err, stages.ErrBadKeyMaterial) || !strings.Contains(err.Error(), "numerics") {
		t.Errorf("material of other numerics: %v, want ErrBadKeyMaterial naming the numerics", err)
	}
	if _, err := stages.Execute(context.Background(), m, nil, nil, t.TempDir(), nil); err != nil {
		t.Errorf("material of this binary's numerics: %v", err)
	}
}
