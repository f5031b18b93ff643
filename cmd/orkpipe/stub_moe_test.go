package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/fixtures"
	"orkpipe/ork/gguf"
)

// TestStubFromMoEPack: `stub SOURCE --pack PACK` checks an expert entry's source digest against that
// expert's rows of the 3-D tensor, so a source whose expert 2 differs is refused, naming the entry.
func TestStubFromMoEPack(t *testing.T) {
	dir := t.TempDir()
	src := fixtures.Synth(t, fixtures.MoE)
	recipePath := filepath.Join(dir, "moe.yaml")
	recipeText := fmt.Sprintf(`name: moe
source:
  model: %s
schemes:
  - match: 'blk\.\d+\.ffn_\w+_exps\.weight'
    method: rtn
    dtype: I4
    group: 32
  - match: 'blk\.\d+\.attn_\w+\.weight'
    method: rtn
    dtype: I4_NATIVE
`, src)
	if err := os.WriteFile(recipePath, []byte(recipeText), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if o, err := runCLI(t, "--cache", filepath.Join(dir, "cache"), "build", recipePath, "-o", out); err != nil {
		t.Fatalf("build: %v\n%s", err, o)
	}
	pk := filepath.Join(out, "moe.orkpack")
	if o, err := runCLI(t, "stub", src, "--pack", pk, "-o", filepath.Join(dir, "ok.gguf")); err != nil {
		t.Fatalf("stub --pack of the MoE pack: %v\n%s", err, o)
	}

	// Flip one byte in expert 2's rows of blk.1.ffn_up_exps.weight, in a copy of the source.
	f, err := gguf.Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := f.Tensor("blk.1.ffn_up_exps.weight")
	if err != nil {
		t.Fatal(err)
	}
	start, _ := f.DataRange(ti)
	at := start + 2*ti.Shape[1]*ti.RowBytes() + 5
	f.Close()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	b[at] ^= 0x10
	other := filepath.Join(dir, "other.gguf")
	if err := os.WriteFile(other, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = runCLI(t, "stub", other, "--pack", pk, "-o", filepath.Join(dir, "bad.gguf"))
	if err == nil || !strings.Contains(err.Error(), `"blk.1.ffn_up_exps.weight#2" was built from different bytes`) {
		t.Fatalf("stub --pack with expert 2 changed in the source: %v", err)
	}
	if _, statErr := os.Stat(filepath.Join(dir, "bad.gguf")); !os.IsNotExist(statErr) {
		t.Errorf("a refused stub was written: %v", statErr)
	}
}
