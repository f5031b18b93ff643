package model

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openKLCase opens a shared model, tokenizes a shared text and opens a KL base file of testdata/kl.
func openKLCase(t *testing.T, model, text, kl string) (*Model, []int32, int32, *KLBase) {
	t.Helper()
	m, ids, bos := openWithText(t, model, text)
	base, err := OpenKLBase(kl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { base.Close() })
	return m, ids, bos, base
}

// TestEvaluateKLBase evaluates the F32 hybrid fixtures against llama.cpp's own logits of them (F32
// K/V cache): the mean KL divergence is below 1e-4 and the base perplexity the file implies is
// llama.cpp's.
func TestEvaluateKLBase(t *testing.T) {
	for _, c := range []struct {
		model, kl string
		ppl       float64 // llama-perplexity's PPL over the same 2 chunks, printed when it wrote the file
	}{
		{"tiny-qwen35.gguf", "testdata/kl/tiny-qwen35-ts128-2.kl", 3092.4739},
		{"tiny-lfm2moe.gguf", "testdata/kl/tiny-lfm2moe-ts128-2.kl", 3931.3478},
	} {
		t.Run(c.model, func(t *testing.T) {
			m, ids, bos, base := openKLCase(t, c.model, "tinystories_sample.txt", c.kl)
			r, err := EvaluateKLBase(context.Background(), m, base, ids, bos, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("PPL(Q) %.4f PPL(base) %.4f; KLD mean %.3g ± %.3g max %.3g; same top %.4f; Δp RMS %.3g%%",
				r.PPL, r.PPLBase, r.KLD.Mean, r.KLD.MeanErr, r.KLD.Max, r.SameTop, 100*r.DeltaPRMS)
			if r.Chunks != 2 || r.Scored != 2*63 {
				t.Errorf("%d chunks, %d scored; want 2, 126", r.Chunks, r.Scored)
			}
			if !(r.KLD.Mean < 1e-4) || r.KLD.Max > 1e-3 {
				t.Errorf("KLD mean %g, max %g: want mean < 1e-4", r.KLD.Mean, r.KLD.Max)
			}
			if rel := math.Abs(r.PPL/c.ppl - 1); rel > 1e-5 {
				t.Errorf("PPL %.4f vs llama.cpp's %.4f: relative %.2e", r.PPL, c.ppl, rel)
			}
			if rel := math.Abs(r.PPLBase/c.ppl - 1); rel > 1e-4 { // the file's log-probabilities are quantized
				t.Errorf("PPL(base) %.4f vs llama.cpp's %.4f: relative %.2e", r.PPLBase, c.ppl, rel)
			}
			if r.SameTop != 1 {
				t.Errorf("same top %.4f, want 1", r.SameTop)
			}
			if _, err := json.Marshal(r); err != nil { // every field finite, even where Q and base agree exactly
				t.Errorf("report: %v", err)
			}
		})
	}
}

// TestEvaluateKLBaseRefuses: a file for another text, another vocabulary, or a truncated, corrupt or
// foreign file is an error naming the file and the field.
func TestEvaluateKLBaseRefuses(t *testing.T) {
	kl := "testdata/kl/tiny-qwen35-ts128-2.kl"
	good, err := os.ReadFile(kl)
	if err != nil {
		t.Fatal(err)
	}
	m, ids, bos, base := openKLCase(t, "tiny-qwen35.gguf", "stories-generated.txt", kl)
	if _, err := EvaluateKLBase(context.Background(), m, base, ids, bos, 0, nil); !errors.Is(err, ErrBadKLBase) || !strings.Contains(err.Error(), "tokens[") {
		t.Errorf("another text: %v", err)
	}
	m2, ids2, bos2, base2 := openKLCase(t, "llama-2-tiny-random.gguf", "tinystories_sample.txt", kl)
	if _, err := EvaluateKLBase(context.Background(), m2, base2, ids2, bos2, 0, nil); !errors.Is(err, ErrBadKLBase) || !strings.Contains(err.Error(), "n_vocab") {
		t.Errorf("another vocabulary: %v", err)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		edit  func([]byte) []byte
		field string
		chunk bool // the error shows when the chunk is read
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }, "implies", false},
		{"extended", func(b []byte) []byte { return append(b, 0) }, "implies", false},
		{"magic", func(b []byte) []byte { b[0] = 'x'; return b }, "magic", false},
		{"n_ctx", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 2); return b }, "n_ctx", false},
		{"n_vocab", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 0); return b }, "n_vocab", false},
		{"n_chunk", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[16:], 3); return b }, "implies", false},
		{"token", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[24:], 512); return b }, "tokens[1]", false},
		{"scale", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[20+4*256:], math.Float32bits(float32(math.NaN())))
			return b
		}, "scale", true},
		{"min_log_prob", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[20+4*256+4:], math.Float32bits(1))
			return b
		}, "min_log_prob", true},
		{"short", func(b []byte) []byte { return b[:10] }, "header", false},
	} {
		path := filepath.Join(dir, c.name+".kl")
		if err := os.WriteFile(path, c.edit(bytes.Clone(good)), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := OpenKLBase(path)
		if err == nil && c.chunk {
			err = b.ReadChunk(0, make([]KLRow, b.Rows()), make([]byte, b.Rows()*b.RowValues()*2))
		}
		if b != nil {
			b.Close()
		}
		if !errors.Is(err, ErrBadKLBase) || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want ErrBadKLBase naming %s and the file", c.name, err, c.field)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
}

// klFile builds a KL base file of nChunk chunks of nCtx tokens over a vocabulary of nVocab, every
// position uniform (scale 0, min_log_prob −ln n_vocab).
func klFile(nCtx, nVocab, nChunk int) []byte {
	b := []byte(klMagic)
	for _, v := range []int{nCtx, nVocab, nChunk} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for i := 0; i < nCtx*nChunk; i++ {
		b = binary.LittleEndian.AppendUint32(b, uint32(i%nVocab))
	}
	nv := 2*((nVocab+1)/2) + 4
	for r := 0; r < nChunk*(nCtx-1-nCtx/2); r++ {
		b = binary.LittleEndian.AppendUint32(b, 0)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(-float32(math.Log(float64(nVocab)))))
		b = append(b, make([]byte, 2*(nv-4))...)
	}
	return b
}

// FuzzReadKLBase reads arbitrary bytes as a KL base file: it must be refused or read whole without
// panicking, and every row of an accepted file has valid fields.
func FuzzReadKLBase(f *testing.F) {
	f.Add(klFile(4, 3, 1))
	f.Add(klFile(6, 8, 2))
	if b, err := os.ReadFile("testdata/kl/tiny-qwen35-ts128-2.kl"); err == nil {
		f.Add(b[:20+4*256+2*(2*((512+1)/2)+4)*2])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ReadKLBase(bytes.NewReader(data), int64(len(data)), "fuzz")
		if err != nil {
			if !errors.Is(err, ErrBadKLBase) {
				t.Fatalf("error %v does not wrap ErrBadKLBase", err)
			}
			return
		}
		rows := make([]KLRow, b.Rows())
		buf := make([]byte, b.Rows()*b.RowValues()*2)
		for c := 0; c < b.NChunk; c++ {
			if err := b.ReadChunk(c, rows, buf); err != nil {
				if !errors.Is(err, ErrBadKLBase) {
					t.Fatalf("chunk %d: error %v does not wrap ErrBadKLBase", c, err)
				}
				return
			}
			for _, r := range rows {
				if !(r.Scale >= 0) || !(r.MinLogProb <= 0) || len(r.Q) != b.NVocab {
					t.Fatalf("chunk %d: accepted row %+v", c, r)
				}
			}
		}
	})
}
