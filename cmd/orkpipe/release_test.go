package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/registry/regtest"
)

// TestBuildPushPullVerify is the release path end to end on real components: `build` the demo
// recipe, `push` its output directory to a real registry (distribution, in-process) with a signature,
// `pull` it with --trust into another directory (byte-identical, read-only), and `verify` it there.
func TestBuildPushPullVerify(t *testing.T) {
	cache, out, dst := t.TempDir(), filepath.Join(t.TempDir(), "out"), filepath.Join(t.TempDir(), "pulled")
	recipe := filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml")
	if o, err := runCLI(t, "--cache", cache, "build", recipe, "-o", out); err != nil {
		t.Fatalf("build: %v\n%s", err, o)
	}
	key := filepath.Join(t.TempDir(), "release.key")
	if o, err := runCLI(t, "key", "generate", "-o", key); err != nil {
		t.Fatalf("key generate: %v\n%s", err, o)
	}
	reg := regtest.Start(t, nil)
	ref := reg.Ref("packs/demo", "v1")
	first, err := runCLI(t, "--cache", cache, "push", out, ref, "--plain-http", "--sign", key)
	if err != nil {
		t.Fatalf("push of a real build output: %v\n%s", err, first)
	}
	// The outputs' sha256 (and BLAKE3 pieces) are remembered beside their objects in the build's
	// store, so pushing again hashes nothing.
	records, _ := filepath.Glob(filepath.Join(cache, "digests", "*", "*"))
	if len(records) < 4 {
		t.Errorf("%d digests records in the build's store after a push of its outputs, want one per output: %v", len(records), records)
	}
	// Pushing the same build again gives the same manifest digest (its last line).
	again, err := runCLI(t, "--cache", cache, "push", out, ref, "--plain-http", "--sign", key)
	if err != nil || strings.TrimSpace(lastLine(first)) != strings.TrimSpace(lastLine(again)) || !strings.HasPrefix(strings.TrimSpace(lastLine(first)), "sha256:") {
		t.Fatalf("second push: %v: digests %q and %q", err, lastLine(first), lastLine(again))
	}
	// The ModelPack config and annotations describe the model from the build's provenance: what
	// modctl inspect and describe show. The name is the header's general.name, which
	// llama2.c's conversion of stories260K sets to "llama".
	dj, err := runCLI(t, "--json", "describe", ref, "--plain-http")
	if err != nil {
		t.Fatalf("describe: %v\n%s", err, dj)
	}
	var desc struct {
		Annotations map[string]string `json:"annotations"`
		Config      struct {
			Descriptor struct{ Name string } `json:"descriptor"`
			Config     struct {
				Architecture, ParamSize, Precision, Quantization string
			} `json:"config"`
		} `json:"config"`
	}
	if err := json.Unmarshal([]byte(dj), &desc); err != nil {
		t.Fatalf("describe --json: %v\n%s", err, dj)
	}
	c := desc.Config.Config
	if desc.Config.Descriptor.Name != "llama" || c.Architecture != "llama" || c.ParamSize != "292.8K" || c.Precision != "int4" || c.Quantization != "gptq" ||
		desc.Annotations["dev.orkpipe.board-profile"] != "rk3588" || !strings.HasPrefix(desc.Annotations["dev.orkpipe.recipe.digest"], "blake3:") {
		t.Errorf("pushed artifact's model description: name %q, config %+v, annotations %v", desc.Config.Descriptor.Name, c, desc.Annotations)
	}
	// The build's summary and report page say which model was packed, as describe does.
	const line = "llama (llama, 292.8K params, int4, gptq)"
	if b, err := os.ReadFile(filepath.Join(out, "summary.txt")); err != nil || !strings.Contains(string(b), "\nmodel: "+line+"\n") {
		t.Errorf("summary.txt (%v) lacks the model line %q:\n%s", err, line, b)
	}
	if b, err := os.ReadFile(filepath.Join(out, "report.html")); err != nil || !strings.Contains(string(b), "orkpack build report of "+line+" for board rk3588") {
		t.Errorf("report.html (%v) does not name the model %q in its lead", err, line)
	}
	if o, err := runCLI(t, "pull", ref, "-o", dst, "--plain-http", "--trust", key+".pub"); err != nil {
		t.Fatalf("pull: %v\n%s", err, o)
	}
	for _, name := range []string{"demo.orkpack", "demo.orkpack.gguf", "report.json", "provenance.json"} {
		a, err1 := os.ReadFile(filepath.Join(out, name))
		b, err2 := os.ReadFile(filepath.Join(dst, name))
		if err1 != nil || err2 != nil || string(a) != string(b) {
			t.Errorf("%s: pulled copy differs from the build output (%v, %v)", name, err1, err2)
		}
	}
	if o, err := runCLI(t, "verify", dst); err != nil {
		t.Fatalf("verify of the pulled build: %v\n%s", err, o)
	}
}
