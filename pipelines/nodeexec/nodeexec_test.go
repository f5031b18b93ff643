package nodeexec_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine/executortest"
	"orkpipe/pipelines/nodeexec"
	"orkpipe/stages"
)

// node writes the inputs into an input directory named by digest and returns the canonical key
// material of stage with params over them.
func node(t *testing.T, stage, params string, inputs map[string]string) (material []byte, m stages.KeyMaterial, inDir string) {
	t.Helper()
	inDir = t.TempDir()
	m = stages.KeyMaterial{Stage: stage, Version: 1, Params: []byte(params), Inputs: map[string]artifacts.Digest{}, Numerics: executortest.Numerics(t)}
	for name, s := range inputs {
		d := artifacts.SumBytes([]byte(s))
		m.Inputs[name] = d
		if err := os.WriteFile(filepath.Join(inDir, d.Hex()), []byte(s), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	material, err := m.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	return material, m, inDir
}

func TestRunWritesOutputsAndRecord(t *testing.T) {
	ctx := context.Background()
	material, m, inDir := node(t, "demo-join", `{}`, map[string]string{"a": "left ", "b": "right"})
	key, _ := m.Key()
	out := filepath.Join(t.TempDir(), "out")
	res, err := nodeexec.Run(ctx, material, inDir, out, nodeexec.WithKey(key), nodeexec.WithVerifyInputs(true))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(out, nodeexec.OutputsDir, "data"))
	if err != nil || string(data) != "left right" {
		t.Fatalf("outputs/data = %q, %v", data, err)
	}
	if res.Key != key || res.Stage != "demo-join" || len(res.Outputs) != 2 || res.Outputs[0].Name != "data" || res.Outputs[1].Name != "manifest.json" {
		t.Fatalf("result %+v", res)
	}
	if res.Outputs[0].Digest != artifacts.SumBytes(data) || res.Outputs[0].Size != int64(len(data)) {
		t.Errorf("recorded %v, file is %v", res.Outputs[0], artifacts.SumBytes(data))
	}
	if res.Orkpipe.Binary.IsZero() || res.Host == "" || res.End.Before(res.Start) {
		t.Errorf("provenance missing: %+v", res)
	}
	back, err := nodeexec.ReadResult(filepath.Join(out, nodeexec.ResultFile))
	if err != nil || back.Key != key || len(back.Outputs) != 2 || back.Outputs[1] != res.Outputs[1] {
		t.Errorf("ReadResult = %+v, %v", back, err)
	}
}

func TestRunRefuses(t *testing.T) {
	ctx := context.Background()
	material, m, inDir := node(t, "demo-xor", `{"key":1}`, map[string]string{"in": "hello"})
	key, _ := m.Key()
	other := artifacts.SumBytes([]byte("another key"))

	tampered := t.TempDir()
	d := m.Inputs["in"]
	os.WriteFile(filepath.Join(tampered, d.Hex()), []byte("jello"), 0o444)

	busy := t.TempDir()
	os.WriteFile(filepath.Join(busy, "left-over"), nil, 0o644)

	for _, tc := range []struct {
		name          string
		material      []byte
		inDir, outDir string
		opts          []nodeexec.Option
		wantIs        error
		wantInMessage string
	}{
		{"key mismatch", material, inDir, "", []nodeexec.Option{nodeexec.WithKey(other)}, nodeexec.ErrBadNodeDir, other.String()},
		{"missing input", material, t.TempDir(), "", nil, nodeexec.ErrBadNodeDir, d.String()},
		{"input bytes differ from name", material, tampered, "", []nodeexec.Option{nodeexec.WithVerifyInputs(true)}, nodeexec.ErrBadNodeDir, "hashes to"},
		{"output dir not empty", material, inDir, busy, nil, nodeexec.ErrBadNodeDir, "left-over"},
		{"malformed material", []byte(`{"stage":"demo-xor"`), inDir, "", nil, stages.ErrBadKeyMaterial, ""},
		{"bad params", bytes.Replace(material, []byte(`"key":1`), []byte(`"key":900`), 1), inDir, "", nil, stages.ErrBadParams, "demo-xor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.outDir
			if out == "" {
				out = filepath.Join(t.TempDir(), "out")
			}
			_, err := nodeexec.Run(ctx, tc.material, tc.inDir, out, tc.opts...)
			if !errors.Is(err, tc.wantIs) || !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Fatalf("err %v, want %v mentioning %q", err, tc.wantIs, tc.wantInMessage)
			}
			if _, err := os.Stat(filepath.Join(out, nodeexec.ResultFile)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed run left a result record: %v", err)
			}
		})
	}
	if _, err := nodeexec.Run(ctx, material, inDir, t.TempDir(), nodeexec.WithKey(key)); err != nil {
		t.Errorf("the untampered node: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := nodeexec.Run(canceled, material, inDir, t.TempDir()); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	if err := nodeexec.WithKey(artifacts.Digest{})(nil); err == nil {
		t.Error("WithKey accepted a zero digest")
	}
}

// TestRunInputDirectories: an input may also be a directory <hex> holding the file as <hex>/<hex>
// (the Dagger executor mounts one per input); one holding anything else is refused.
func TestRunInputDirectories(t *testing.T) {
	ctx := context.Background()
	material, m, flat := node(t, "demo-join", `{}`, map[string]string{"a": "left ", "b": "right"})
	nested, wrong := t.TempDir(), t.TempDir()
	for _, d := range m.Inputs {
		b, err := os.ReadFile(filepath.Join(flat, d.Hex()))
		if err != nil {
			t.Fatal(err)
		}
		for dir, name := range map[string]string{nested: d.Hex(), wrong: "data"} {
			if err := os.MkdirAll(filepath.Join(dir, d.Hex()), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, d.Hex(), name), b, 0o444); err != nil {
				t.Fatal(err)
			}
		}
	}
	want, err := nodeexec.Run(ctx, material, flat, filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := nodeexec.Run(ctx, material, nested, filepath.Join(t.TempDir(), "out"), nodeexec.WithVerifyInputs(true))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Outputs, want.Outputs) {
		t.Errorf("outputs from <hex>/<hex> %v, from <hex> %v", got.Outputs, want.Outputs)
	}
	if _, err := nodeexec.Run(ctx, material, wrong, filepath.Join(t.TempDir(), "out")); !errors.Is(err, nodeexec.ErrBadNodeDir) {
		t.Errorf("a directory <hex> without <hex>/<hex>: %v, want ErrBadNodeDir", err)
	}
}
