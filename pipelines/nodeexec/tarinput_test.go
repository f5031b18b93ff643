package nodeexec_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
	"orkpipe/pipelines/engine/executortest"
	"orkpipe/pipelines/nodeexec"
	"orkpipe/stages"
)

// sparseContent is a 3 MiB file with three short runs of data between holes.
func sparseContent() []byte {
	b := make([]byte, 3<<20)
	copy(b[100:], "GGUF header")
	copy(b[1<<20:], bytes.Repeat([]byte("tensor "), 2000))
	b[len(b)-1] = 7
	return b
}

// writeTarInput writes content's tar form, named name, as <dir>/<hex>/<hex>.tar.
func writeTarInput(t *testing.T, dir string, d artifacts.Digest, name string, content []byte) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exts, err := sparse.ContentExtents(context.Background(), f, int64(len(content)))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, d.Hex()), 0o755)
	out, err := os.Create(filepath.Join(dir, d.Hex(), d.Hex()+nodeexec.TarSuffix))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := sparse.WriteTar(context.Background(), out, f, name, int64(len(content)), exts); err != nil {
		t.Fatal(err)
	}
}

// TestRunTarInputs: an input in its tar form (<hex>/<hex>.tar) gives the stage the same bytes as
// the file itself — once unpacked for two inputs of one digest — and the unpacked files are gone
// when Run returns, whether the node succeeds or fails. A tar form of another file (by its name, or
// by its bytes: checked even without WithVerifyInputs), or a damaged one, is refused naming the
// input.
func TestRunTarInputs(t *testing.T) {
	ctx := context.Background()
	content := sparseContent()
	d := artifacts.SumBytes(content)
	m := stages.KeyMaterial{Stage: "demo-join", Version: 1, Params: []byte(`{}`), Inputs: map[string]artifacts.Digest{"a": d, "b": d},
		Numerics: executortest.Numerics(t)}
	material, err := m.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	flat := t.TempDir()
	os.WriteFile(filepath.Join(flat, d.Hex()), content, 0o444)
	want, err := nodeexec.Run(ctx, material, flat, filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}

	good, misnamed, otherBytes, damaged := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	writeTarInput(t, good, d, d.Hex(), content)
	writeTarInput(t, misnamed, d, artifacts.SumBytes([]byte("other")).Hex(), content)
	other := sparseContent()
	other[1<<20] = 'T' // one byte differs
	writeTarInput(t, otherBytes, d, d.Hex(), other)
	writeTarInput(t, damaged, d, d.Hex(), content)
	p := filepath.Join(damaged, d.Hex(), d.Hex()+nodeexec.TarSuffix)
	b, _ := os.ReadFile(p)
	os.WriteFile(p, b[:len(b)-600], 0o644) // the end of the archive is missing
	scratch := filepath.Join(t.TempDir(), "scratch")

	got, err := nodeexec.Run(ctx, material, good, filepath.Join(t.TempDir(), "out"), nodeexec.WithVerifyInputs(true), nodeexec.WithScratch(scratch))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Outputs) != len(want.Outputs) || got.Outputs[0] != want.Outputs[0] {
		t.Errorf("outputs from the tar form %v, from the file %v", got.Outputs, want.Outputs)
	}
	for _, tc := range []struct {
		name, inDir string
		wantIn      string
	}{
		{"tar form of another file", misnamed, "want " + d.Hex()},
		{"tar form of other bytes", otherBytes, "hashes to " + artifacts.SumBytes(other).String() + ", its name says " + d.String()},
		{"damaged tar form", damaged, "not the tar form"},
	} {
		_, err := nodeexec.Run(ctx, material, tc.inDir, filepath.Join(t.TempDir(), "out"), nodeexec.WithVerifyInputs(false), nodeexec.WithScratch(scratch))
		if !errors.Is(err, nodeexec.ErrBadNodeDir) || !bytes.Contains([]byte(err.Error()), []byte(tc.wantIn)) {
			t.Errorf("%s: %v, want ErrBadNodeDir saying %q", tc.name, err, tc.wantIn)
		}
	}
	ents, err := os.ReadDir(scratch)
	if err != nil || len(ents) != 0 {
		t.Errorf("scratch after the runs: %v (%v), want empty", ents, err)
	}
}
