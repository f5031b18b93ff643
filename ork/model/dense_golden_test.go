package model

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math"
	"os"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/internal/testfiles"
)

// denseLogitsDigest is the BLAKE3 of the little-endian float32 bits of the logits of the first 96
// tokens of stories-generated.txt under stories260K.gguf (float activations), measured with the forward
// pass before MoE blocks were added (commit 07456d7). A dense model must keep these bits exactly.
const denseLogitsDigest = "78137930fcd89c87348c41abafe697eea85595772a2fdc7a85b50e5190c964ff"

func TestDenseForwardBitIdentical(t *testing.T) {
	if !gonumSgemm() {
		testfiles.SkipBuild(t, "built with -tags blas: the products run OpenBLAS's sgemm, whose summation order differs from gonum's; the digest is of the pure-Go build")
	}
	ctx := context.Background()
	m, tok, f, err := OpenGGUF(ctx, testfiles.Path(t, "stories260K.gguf"), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	text, err := os.ReadFile(testfiles.Path(t, "stories-generated.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(string(text[:2000]), true, false)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := m.Forward(ctx, ids[:96])
	if err != nil {
		t.Fatal(err)
	}
	h := blake3.New()
	var b [4]byte
	for _, v := range logits {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		h.Write(b[:])
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != denseLogitsDigest {
		t.Fatalf("stories260K logits digest %s, want %s: the dense forward pass changed", got, denseLogitsDigest)
	}
}
