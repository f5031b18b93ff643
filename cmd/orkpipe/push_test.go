package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

// runRegistryCLI runs the CLI in-process and returns stdout, stderr and the exit status.
func runRegistryCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx := context.Background()
	root := newRootCommand(newGlobalOptions(&out, &errb))
	root.SetArgs(args)
	code := exitCode(ctx, root.ExecuteContext(ctx), &errb)
	return out.String(), errb.String(), code
}

const testProvenance = `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"model.orkpack","digest":{"sha256":"00"}}],
"predicateType":"https://slsa.dev/provenance/v1","predicate":{"buildDefinition":{"buildType":"https://orkpipe.dev/build/v1",
"externalParameters":{"model":{"name":"stories260K","architecture":"llama"}}},"runDetails":{"builder":{"id":"test"},
"metadata":{"finishedOn":"2026-11-02T10:30:00Z"}}}}`

func TestPushPullDescribeCLI(t *testing.T) {
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	in, err := os.Open(testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := os.Create(filepath.Join(src, "stories260K.gguf"))
	io.Copy(out, in)
	in.Close()
	out.Close()
	os.WriteFile(filepath.Join(src, "provenance.json"), []byte(testProvenance), 0o644)
	key := filepath.Join(t.TempDir(), "release.key")
	ref := reg.Ref("packs/cli", "v1")

	if _, errOut, code := runRegistryCLI(t, "key", "generate", "-o", key); code != 0 {
		t.Fatalf("key generate: exit %d: %s", code, errOut)
	}
	cache := t.TempDir()
	stdout, errOut, code := runRegistryCLI(t, "--cache", cache, "push", src, ref, "--plain-http", "--range-size", "4MiB", "--sign", key, "-j", "2")
	if code != 0 {
		t.Fatalf("push: exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "push stories260K.gguf: done, verified") {
		t.Errorf("push progress (not a terminal: plain lines) missing from stderr:\n%s", errOut)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	digest := lines[len(lines)-1]
	if !strings.HasPrefix(digest, "sha256:") || len(digest) != 71 {
		t.Fatalf("push: last line %q is not the manifest digest", digest)
	}
	stdout, errOut, code = runRegistryCLI(t, "--cache", cache, "--json", "push", src, ref, "--plain-http", "--range-size", "4MiB")
	if code != 0 {
		t.Fatalf("push --json: exit %d: %s", code, errOut)
	}
	var pj struct{ Digest, Ref string }
	if err := json.Unmarshal([]byte(stdout), &pj); err != nil || pj.Digest != digest || pj.Ref != ref {
		t.Fatalf("push --json: %q (%v), want digest %s", stdout, err, digest)
	}

	dst := filepath.Join(t.TempDir(), "out")
	if _, errOut, code := runRegistryCLI(t, "pull", ref, "-o", dst, "--plain-http", "--trust", key+".pub"); code != 0 {
		t.Fatalf("pull --trust: exit %d: %s", code, errOut)
	}
	a, _ := os.ReadFile(filepath.Join(src, "stories260K.gguf"))
	b, _ := os.ReadFile(filepath.Join(dst, "stories260K.gguf"))
	if !bytes.Equal(a, b) {
		t.Fatal("pulled stories260K.gguf differs")
	}

	other := filepath.Join(t.TempDir(), "other.key")
	runRegistryCLI(t, "key", "generate", "-o", other)
	dst2 := filepath.Join(t.TempDir(), "out2")
	_, errOut, code = runRegistryCLI(t, "pull", ref, "-o", dst2, "--plain-http", "--trust", other+".pub")
	if code != 1 || !strings.Contains(errOut, "no valid signature by a trusted key") {
		t.Fatalf("pull trusting another key: exit %d: %s", code, errOut)
	}

	stdout, errOut, code = runRegistryCLI(t, "--json", "describe", ref, "--plain-http", "--trust", key+".pub")
	if code != 0 {
		t.Fatalf("describe: exit %d: %s", code, errOut)
	}
	var dj struct {
		Digest string
		Files  []struct {
			Name, MediaType, Title string
			Ranges                 int
		}
		Attestations []struct{ TrustedBy []string }
	}
	if err := json.Unmarshal([]byte(stdout), &dj); err != nil {
		t.Fatal(err)
	}
	if dj.Digest != digest || len(dj.Files) != 2 || len(dj.Attestations) != 1 || len(dj.Attestations[0].TrustedBy) != 1 {
		t.Fatalf("describe --json: %s", stdout)
	}
	if f := dj.Files[1]; f.Name != "stories260K.gguf" || f.MediaType != "application/vnd.cncf.model.weight.v1.raw" || f.Title != f.Name || f.Ranges != 1 {
		t.Errorf("describe --json: file %+v", f)
	}
	if _, errOut, code := runRegistryCLI(t, "push", src, ref, "--plain-http", "--range-size", "3MiB"); code != 2 || !strings.Contains(errOut, "power of two") {
		t.Errorf("push --range-size 3MiB: exit %d: %s", code, errOut)
	}
	if _, _, code := runRegistryCLI(t, "pull", ref); code != 2 {
		t.Fatalf("pull without -o: exit %d, want 2", code)
	}
	if _, errOut, code := runRegistryCLI(t, "pull", ref, "-o", t.TempDir()); code != 1 || !strings.Contains(errOut, "plain HTTP") {
		t.Fatalf("pull without --plain-http: exit %d: %s", code, errOut)
	}
}

// TestPushCompressCLI: by default a file that compresses travels as tar+zstd and push says which
// clients cannot read it; --compress never pushes it raw, without the note; any other value is a
// usage error naming the flag.
func TestPushCompressCLI(t *testing.T) {
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	text, err := os.ReadFile(testfiles.Path(t, "stories-generated.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "corpus.txt"), bytes.Repeat(text, 64), 0o644); err != nil { // ~2.8 MB of text
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "provenance.json"), []byte(testProvenance), 0o644)
	cache := t.TempDir()
	formOf := func(stdout string) string {
		for _, l := range strings.Split(stdout, "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[0] == "corpus.txt" {
				return f[3]
			}
		}
		return ""
	}
	const note = "clients that extract no tar+zstd layer (modctl) cannot pull this artifact"
	stdout, errOut, code := runRegistryCLI(t, "--cache", cache, "push", src, reg.Ref("packs/z", "auto"), "--plain-http")
	if code != 0 {
		t.Fatalf("push: exit %d: %s", code, errOut)
	}
	if formOf(stdout) != "tar+zstd" || !strings.Contains(errOut, "note: 1 file(s) travel as tar+zstd layers") || !strings.Contains(errOut, note) {
		t.Errorf("default push: corpus.txt as %q; stderr:\n%s", formOf(stdout), errOut)
	}
	stdout, errOut, code = runRegistryCLI(t, "--cache", cache, "push", src, reg.Ref("packs/z", "never"), "--plain-http", "--compress", "never")
	if code != 0 {
		t.Fatalf("push --compress never: exit %d: %s", code, errOut)
	}
	if formOf(stdout) != "raw" || strings.Contains(errOut, note) {
		t.Errorf("push --compress never: corpus.txt as %q; stderr:\n%s", formOf(stdout), errOut)
	}
	stdout, errOut, code = runRegistryCLI(t, "--cache", cache, "--json", "push", src, reg.Ref("packs/z", "json"), "--plain-http")
	if code != 0 {
		t.Fatalf("push --json: exit %d: %s", code, errOut)
	}
	var pj struct {
		Files []struct{ Name, Form string }
	}
	if err := json.Unmarshal([]byte(stdout), &pj); err != nil || len(pj.Files) != 2 || pj.Files[0].Name != "corpus.txt" || pj.Files[0].Form != "tar+zstd" || pj.Files[1].Form != "raw" {
		t.Errorf("push --json files: %+v (%v)\n%s", pj.Files, err, stdout)
	}
	if _, errOut, code := runRegistryCLI(t, "push", src, reg.Ref("packs/z", "bad"), "--plain-http", "--compress", "gzip"); code != 2 || !strings.Contains(errOut, `--compress: compression "gzip": want "auto" or "never"`) {
		t.Errorf("push --compress gzip: exit %d: %s", code, errOut)
	}
}
