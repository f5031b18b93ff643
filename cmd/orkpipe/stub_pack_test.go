package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
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
	// A pack whose entry has a stub tensor's name but another shape (stories260K's attn_q is 64 x 64).
	bad := filepath.Join(dir, "shape.orkpack")
	w, err := pack.Create(context.Background(), bad, board.Planner(board.RK3588()))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(context.Background(), pack.Weight{Meta: pack.Meta{Name: "blk.0.attn_q.weight", DType: pack.I8, K: 64, N: 32, Source: pack.Digest{1}},
		Codes: make([]int8, 64*32), Scales: make([]float32, 32)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = runCLI(t, "stub", "verify", stub, "--pack", bad, "--allow-zero", `blk\..*`)
	if err == nil || !strings.Contains(err.Error(), `pack entry "blk.0.attn_q.weight" is 64 x 32 (K x N), tensor "blk.0.attn_q.weight" is [64 64]: want the entry's N`) {
		t.Errorf("verify against a pack of another shape: %v", err)
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
