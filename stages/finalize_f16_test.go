package stages_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/ork/quant"
)

// TestFinalizeF16Range: dtype F16 holds the source's values in binary16; a value beyond its range
// (finite in the F32 source, 70000 > 65504) is refused naming the weight, row and column, where it
// became an infinity and failed the stage with "json: unsupported value: +Inf" (its relative error).
func TestFinalizeF16Range(t *testing.T) {
	src := testfiles.Path(t, "stories260K.gguf")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := f.Tensor("blk.0.attn_q.weight")
	f.Close()
	if err != nil || ti.Type != gguf.TypeF32 {
		t.Fatalf("blk.0.attn_q.weight: %v %v, want an F32 tensor", ti.Type, err)
	}
	start, _ := f.DataRange(ti)
	params := `{"tensor":"blk.0.attn_q.weight","method":"none","dtype":"F16","group":0,"rotation":"none","act_bits":16,` +
		`"clip_grid":null,"damp":0,"act_order":false,"seed":0,"n":64,"k":64}`
	if _, err := runStage(t, "finalize", params, map[string]string{"model": src}); err != nil {
		t.Fatalf("the shared model's weight in F16: %v", err)
	}
	binary.LittleEndian.PutUint32(b[start+4*(64+36):], math.Float32bits(70000))
	big := filepath.Join(t.TempDir(), "big.gguf")
	if err := os.WriteFile(big, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = runStage(t, "finalize", params, map[string]string{"model": big})
	want := "blk.0.attn_q.weight: value 70000 at row 1 col 36: dtype F16 holds finite values up to ±65504"
	if !errors.Is(err, quant.ErrNotFinite) || !strings.Contains(err.Error(), want) {
		t.Fatalf("finalize of a value beyond binary16: %v, want ErrNotFinite saying %q", err, want)
	}
}
