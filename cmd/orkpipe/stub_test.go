package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

const matmulOwn = `^blk\.\d+\.(attn_(q|k|v|output)|ffn_(gate|up|down))\.weight$`

// runCLI runs the root command with args, as main does minus the process exit.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCommand(newGlobalOptions(&out, &out))
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestStubCommand(t *testing.T) {
	src := testfiles.Path(t, "stories260K.gguf")
	stub := filepath.Join(t.TempDir(), "stub.gguf")
	out, err := runCLI(t, "stub", src, "--own", matmulOwn, "-o", stub)
	if err != nil {
		t.Fatalf("stub: %v\n%s", err, out)
	}
	if !strings.Contains(out, "35 owned tensors (906240 bytes) left as holes") {
		t.Errorf("stub output: %s", out)
	}
	out, err = runCLI(t, "stub", "verify", stub, "--own", matmulOwn, "--source", src)
	if err != nil || !strings.Contains(out, "stub OK: 48 tensors, 35 owned") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	// A narrower owned set than the pack's: the other matmul holes are all-zero, non-owned tensors.
	_, err = runCLI(t, "stub", "verify", stub, "--own", `ffn_down`)
	if !errors.Is(err, gguf.ErrStub) || !strings.Contains(err.Error(), `tensor "blk.0.attn_q.weight": not owned by the pack and all zero`) {
		t.Errorf("narrow verify: %v", err)
	}
	// ...unless those are explicitly allowed to be zero.
	if _, err = runCLI(t, "stub", "verify", stub, "--own", `ffn_down`, "--allow-zero", `attn_|ffn_(gate|up)`); err != nil {
		t.Errorf("allow-zero verify: %v", err)
	}
	// Another source's header.
	_, err = runCLI(t, "stub", "verify", stub, "--own", matmulOwn, "--source", testfiles.Path(t, "stories260K-Q4_0.gguf"))
	if !errors.Is(err, gguf.ErrStub) || !strings.Contains(err.Error(), "header region digest") {
		t.Errorf("wrong source: %v", err)
	}
	// JSON report on failure still printed, and the error returned.
	out, err = runCLI(t, "--json", "stub", "verify", stub, "--own", `ffn_down`)
	if err == nil || !strings.Contains(out, `"ok":false`) || !strings.Contains(out, `"tensor":"blk.0.attn_q.weight"`) {
		t.Errorf("json verify: %v\n%s", err, out)
	}
	// The same stub again: the existing file already holds it and is left as it is (same inode).
	st0, _ := os.Stat(stub)
	out, err = runCLI(t, "stub", src, "--own", matmulOwn, "-o", stub)
	if st1, _ := os.Stat(stub); err != nil || !strings.Contains(out, "unchanged (it already held this stub)") || !os.SameFile(st0, st1) {
		t.Errorf("the same stub again: %v, same file %v\n%s", err, os.SameFile(st0, st1), out)
	}
	// Existing output untouched without --force, replaced with it.
	before, _ := os.ReadFile(stub)
	if _, err = runCLI(t, "stub", src, "--own", "ffn_down", "-o", stub); !errors.Is(err, os.ErrExist) {
		t.Errorf("overwrite without --force: %v", err)
	}
	if after, _ := os.ReadFile(stub); !bytes.Equal(before, after) {
		t.Error("existing stub changed by a refused emit")
	}
	if _, err = runCLI(t, "stub", src, "--own", "ffn_down", "-o", stub, "--force"); err != nil {
		t.Errorf("--force: %v", err)
	}
	if _, err = runCLI(t, "stub", "verify", stub, "--own", "ffn_down", "--allow-zero", "."); err != nil {
		t.Errorf("verify replaced stub: %v", err)
	}
	// Truncated stub.
	if err := os.Truncate(stub, 500000); err != nil {
		t.Fatal(err)
	}
	if _, err = runCLI(t, "stub", "verify", stub, "--own", "ffn_down"); !errors.Is(err, gguf.ErrStub) || !strings.Contains(err.Error(), "past the end of the file") {
		t.Errorf("truncated: %v", err)
	}
}

func TestStubCommandUsage(t *testing.T) {
	src := testfiles.Path(t, "stories260K.gguf")
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stub", src, "-o", filepath.Join(dir, "a.gguf")}, "--own REGEX is required"},
		{[]string{"stub", src, "--own", "x"}, "-o STUB.gguf is required"},
		{[]string{"stub", src, "--own", "x[", "-o", filepath.Join(dir, "b.gguf")}, "--own: error parsing regexp"},
		{[]string{"stub", "verify", src, "--own", ".", "--allow-zero", "("}, "--allow-zero"},
	} {
		_, err := runCLI(t, tc.args...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want usage error %q", tc.args, err, tc.want)
		}
	}
	_, err := runCLI(t, "stub", src, "--own", "no_such_tensor", "-o", filepath.Join(dir, "c.gguf"))
	if !errors.Is(err, gguf.ErrTensorNotFound) || !strings.Contains(err.Error(), "no tensor name matches") {
		t.Errorf("owned set matching nothing: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "c.gguf")); !os.IsNotExist(err) {
		t.Error("failed stub left an output")
	}
}
