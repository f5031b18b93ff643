package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// TestStubFromPack emits and verifies a stub whose owned set is a real orkpack's entries.
func TestStubFromPack(t *testing.T) {
	dir := t.TempDir()
	src := testfiles.Path(t, "stories260K.gguf")
	pk := buildStoriesPack(t, dir, "s.orkpack", "", "")
	stub := filepath.Join(dir, "s.orkpack.gguf")
	out, err := runCLI(t, "stub", src, "--pack", pk, "-o", stub)
	if err != nil {
		t.Fatalf("stub --pack: %v\n%s", err, out)
	}
	// The helper packs every 2-D tensor except token_embd: 35 matmul weights + output.weight.
	if !strings.Contains(out, "36 owned tensors") {
		t.Errorf("stub --pack output: %s", out)
	}
	if out, err := runCLI(t, "stub", "verify", stub, "--pack", pk, "--source", src); err != nil {
		t.Fatalf("verify --pack: %v\n%s", err, out)
	}
	// A pack that lacks one tensor: the stub's hole for it is now an all-zero, non-owned tensor.
	narrow := buildStoriesPack(t, dir, "narrow.orkpack", "", "blk.2.ffn_up.weight")
	_, err = runCLI(t, "stub", "verify", stub, "--pack", narrow)
	if !errors.Is(err, gguf.ErrStub) || !strings.Contains(err.Error(), "blk.2.ffn_up.weight") {
		t.Errorf("verify against a pack missing a tensor: %v", err)
	}
	// Both selectors at once is a usage error.
	var ue usageError
	if _, err := runCLI(t, "stub", "verify", stub, "--pack", pk, "--own", "x"); !errors.As(err, &ue) {
		t.Errorf("--pack with --own: %v", err)
	}
	// A pack from another model: names that are not tensors of the source.
	other := testfiles.Path(t, "llama-2-tiny-random.gguf")
	if _, err := runCLI(t, "stub", other, "--pack", pk, "-o", filepath.Join(dir, "x.gguf")); err == nil || !strings.Contains(err.Error(), "built from another model") {
		t.Errorf("pack of another model: %v", err)
	}
}

// TestStubFromPackOfAnotherModel: same tensor names, different bytes (the Q8_0 file is stories260K
// quantized) — the entries' source digests refuse it.
func TestStubFromPackOfAnotherModel(t *testing.T) {
	dir := t.TempDir()
	pk := buildStoriesPack(t, dir, "s.orkpack", "", "")
	q8 := testfiles.Path(t, "stories260K-Q8_0.gguf")
	_, err := runCLI(t, "stub", q8, "--pack", pk, "-o", filepath.Join(dir, "x.gguf"))
	if err == nil || !strings.Contains(err.Error(), "built from different bytes") {
		t.Errorf("stub of the Q8_0 model with the F32 model's pack: %v", err)
	}
}
