package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
)

// orkpipeExit runs the CLI as main does and returns stdout, stderr and the exit status.
func orkpipeExit(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx := context.Background()
	root := newRootCommand(newGlobalOptions(&out, &errb))
	root.SetArgs(args)
	code = exitCode(ctx, root.ExecuteContext(ctx), &errb)
	return out.String(), errb.String(), code
}

func TestHashCommand(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	dir := t.TempDir()
	hello := filepath.Join(dir, "hello.txt")
	os.WriteFile(hello, []byte("hello"), 0o644)
	gguf := testfiles.Path(t, "stories260K.gguf")
	ggufBytes, err := os.ReadFile(gguf)
	if err != nil {
		t.Fatal(err)
	}

	out, errOut, code := orkpipeExit(t, "--cache", cache, "hash", hello, gguf)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// BLAKE3("hello") is a published test value; the GGUF line is checked against the bytes.
	want := "ea8f163db38682925e4491c5e58d4bb3506ef8c14eb78a86e908c5624a67200f  " + hello + "\n" +
		artifacts.SumBytes(ggufBytes).Hex() + "  " + gguf + "\n"
	if out != want {
		t.Fatalf("hash output:\n%s\nwant:\n%s", out, want)
	}

	// --json
	out, _, code = orkpipeExit(t, "--cache", cache, "--json", "hash", hello)
	var res []hashResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res) != 1 ||
		res[0].Digest != "blake3:ea8f163db38682925e4491c5e58d4bb3506ef8c14eb78a86e908c5624a67200f" || res[0].Size != 5 {
		t.Fatalf("--json: exit %d, %s", code, out)
	}

	// A missing file: reported on stderr, the others still printed, exit 1.
	out, errOut, code = orkpipeExit(t, "--cache", cache, "hash", hello, filepath.Join(dir, "missing"))
	if code != 1 || !strings.Contains(errOut, "missing") || !strings.HasPrefix(out, "ea8f163d") {
		t.Fatalf("missing file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// Usage errors exit 2.
	if _, _, code := orkpipeExit(t, "--cache", cache, "hash"); code != 2 {
		t.Fatalf("no paths: exit %d, want 2", code)
	}
}

func TestHashCheck(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.bin"), filepath.Join(dir, `odd\name`)
	os.WriteFile(a, []byte("pack A"), 0o644)
	os.WriteFile(b, []byte("pack B"), 0o644)
	sums, _, code := orkpipeExit(t, "--cache", cache, "hash", a, b)
	if code != 0 || !strings.Contains(sums, "\\"+artifacts.SumBytes([]byte("pack B")).Hex()+"  "+strings.ReplaceAll(b, `\`, `\\`)) {
		t.Fatalf("hash with an escaped path: exit %d, %q", code, sums)
	}
	list := filepath.Join(dir, "SUMS")
	os.WriteFile(list, []byte(sums), 0o644)

	out, errOut, code := orkpipeExit(t, "--cache", cache, "hash", "--check", list)
	if code != 0 || out != a+": OK\n"+strings.ReplaceAll(b, `\`, `\\`)+": OK\n" {
		t.Fatalf("check of intact files: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// Change one file (same size): FAILED, exit 1.
	os.WriteFile(a, []byte("pack a"), 0o644)
	out, errOut, code = orkpipeExit(t, "--cache", cache, "hash", "--check", list)
	if code != 1 || !strings.Contains(out, a+": FAILED\n") || !strings.Contains(out, ": OK\n") || !strings.Contains(errOut, "1 of 2 files FAILED") {
		t.Fatalf("check after a change: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, _, code = orkpipeExit(t, "--cache", cache, "--json", "hash", "--check", list)
	var res []hashResult
	if code != 1 || json.Unmarshal([]byte(out), &res) != nil || len(res) != 2 || *res[0].OK || !*res[1].OK {
		t.Fatalf("--json check: exit %d, %s", code, out)
	}

	// A removed file: FAILED with the reason.
	os.Remove(b)
	out, _, code = orkpipeExit(t, "--cache", cache, "hash", "--check", list)
	if code != 1 || !strings.Contains(out, "FAILED (") {
		t.Fatalf("check of a removed file: exit %d, %q", code, out)
	}

	// A malformed list names the file and line.
	bad := filepath.Join(dir, "BAD")
	os.WriteFile(bad, []byte(sums+"not a sum line\n"), 0o644)
	_, errOut, code = orkpipeExit(t, "--cache", cache, "hash", "--check", bad)
	if code != 1 || !strings.Contains(errOut, bad+" line 3") {
		t.Fatalf("malformed list: exit %d, stderr %q", code, errOut)
	}
	if _, _, code := orkpipeExit(t, "--cache", cache, "hash", "--check", list, a); code != 2 {
		t.Fatalf("--check with PATH arguments: exit %d, want 2", code)
	}
}
