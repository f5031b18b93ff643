package model

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
)

// poked writes a copy of a shared test model with element index of tensor set to v (an F32 or F16
// tensor) and returns its path.
func poked(t *testing.T, name, tensor string, index int64, v float32) string {
	t.Helper()
	src := testfiles.Path(t, name)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ti, err := f.Tensor(tensor)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := f.DataRange(ti)
	switch ti.Type {
	case gguf.TypeF32:
		binary.LittleEndian.PutUint32(b[start+4*index:], math.Float32bits(v))
	case gguf.TypeF16:
		binary.LittleEndian.PutUint16(b[start+2*index:], gguf.F32ToF16(v))
	default:
		t.Fatalf("%s: tensor %s is %s, want F32 or F16", name, tensor, ti.Type)
	}
	path := filepath.Join(t.TempDir(), "poked-"+name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestForwardNotFinite: a NaN or an infinity in a model's weights stops the forward pass with
// ErrNotFinite at the embeddings, the block or the logits it first reaches, naming the tensor and the
// element that holds it, in a llama, a qwen35 (a DeltaNet weight) and an lfm2moe model (F16, and an
// expert); finite weights whose products overflow are named as an overflow.
func TestForwardNotFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name, file, tensor string
		index              int64
		v                  float32
		want               []string
	}{
		{"matmul weight", "stories260K.gguf", "blk.2.attn_q.weight", 100, nan,
			[]string{"NaN in the output of blk.2 at position 0, channel ", "tensor blk.2.attn_q.weight of ", "holds NaN at row 1, column 36"}},
		{"norm", "stories260K.gguf", "blk.1.ffn_norm.weight", 3, inf,
			[]string{"in the output of blk.1 at position ", "tensor blk.1.ffn_norm.weight of ", "holds +Inf at row 0, column 3"}},
		{"embedding", "stories260K.gguf", "token_embd.weight", 5*64 + 2, nan,
			[]string{"tensor token_embd.weight: row 5 (the token at position 1) holds NaN at column 2"}},
		{"output", "stories260K.gguf", "output.weight", 7*64 + 3, inf,
			[]string{"Inf in the logits at position 0, vocabulary entry 7", "tensor output.weight of ", "holds +Inf at row 7, column 3"}},
		{"overflow", "stories260K.gguf", "blk.3.ffn_norm.weight", 0, 3e38,
			[]string{"in the output of blk.3 at position ", "the weights that made it hold no NaN or infinity, so a value overflowed"}},
		{"deltanet", "tiny-qwen35.gguf", "blk.1.ssm_alpha.weight", 64*2 + 9, nan,
			[]string{"in the output of blk.1 at position ", "tensor blk.1.ssm_alpha.weight of ", "holds NaN at row 2, column 9"}},
		{"F16", "tiny-lfm2moe-f16.gguf", "blk.1.shortconv.in_proj.weight", 64*3 + 1, -inf,
			[]string{"in the output of blk.1 at position ", "tensor blk.1.shortconv.in_proj.weight of ", "holds -Inf at row 3, column 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := poked(t, tc.file, tc.tensor, tc.index, tc.v)
			m, _, f, err := OpenGGUF(context.Background(), path, 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, err = m.Forward(context.Background(), []int32{1, 5, 9, 17, 33, 60, 2, 11})
			if !errors.Is(err, ErrNotFinite) {
				t.Fatalf("Forward: %v, want ErrNotFinite", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
