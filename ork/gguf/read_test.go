package gguf

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"

	"orkpipe/internal/testfiles"
)

// storiesShapes is the tensor table of stories260K (SOURCES.md), in GGUF ne order.
func storiesShapes() map[string][]int64 {
	m := map[string][]int64{
		"token_embd.weight":  {64, 512},
		"output.weight":      {64, 512},
		"output_norm.weight": {64},
	}
	for b := 0; b < 5; b++ {
		p := fmt.Sprintf("blk.%d.", b)
		m[p+"attn_q.weight"] = []int64{64, 64}
		m[p+"attn_k.weight"] = []int64{64, 32}
		m[p+"attn_v.weight"] = []int64{64, 32}
		m[p+"attn_output.weight"] = []int64{64, 64}
		m[p+"attn_norm.weight"] = []int64{64}
		m[p+"ffn_gate.weight"] = []int64{64, 172}
		m[p+"ffn_up.weight"] = []int64{64, 172}
		m[p+"ffn_down.weight"] = []int64{172, 64}
		m[p+"ffn_norm.weight"] = []int64{64}
	}
	return m
}

func TestReadTestdata(t *testing.T) {
	cases := []struct {
		file    string
		kv      int
		tensors int
		types   map[Type]int
		stories bool // same names and shapes as stories260K
	}{
		{"stories260K.gguf", 19, 48, map[Type]int{TypeF32: 48}, true},
		{"stories260K-Q8_0.gguf", 21, 48, map[Type]int{TypeQ8_0: 32, TypeF16: 5, TypeF32: 11}, true},
		{"stories260K-Q4_0.gguf", 21, 48, map[Type]int{TypeQ4_0: 31, TypeQ8_0: 1, TypeF16: 5, TypeF32: 11}, true},
		{"stories260K-Q4_K_M.gguf", 21, 48, map[Type]int{TypeQ5_0: 29, TypeQ8_0: 3, TypeF16: 5, TypeF32: 11}, true},
		{"llama-2-tiny-random.gguf", 18, 12, map[Type]int{TypeF16: 9, TypeF32: 3}, false},
		{"ggml-vocab-llama-spm.gguf", 22, 0, map[Type]int{}, false},
		{"ggml-vocab-gpt-2.gguf", 16, 0, map[Type]int{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			f, err := Open(context.Background(), testfiles.Path(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Version != 3 || f.Alignment != 32 {
				t.Errorf("version %d alignment %d, want 3 and 32", f.Version, f.Alignment)
			}
			if len(f.KV) != tc.kv || len(f.Tensors) != tc.tensors {
				t.Errorf("%d KV, %d tensors; want %d, %d", len(f.KV), len(f.Tensors), tc.kv, tc.tensors)
			}
			types := map[Type]int{}
			for _, ti := range f.Tensors {
				types[ti.Type]++
			}
			if fmt.Sprint(types) != fmt.Sprint(tc.types) {
				t.Errorf("types %v, want %v", types, tc.types)
			}
			if tc.stories {
				shapes := storiesShapes()
				for _, ti := range f.Tensors {
					want, ok := shapes[ti.Name]
					if !ok {
						t.Errorf("unexpected tensor %q", ti.Name)
						continue
					}
					if fmt.Sprint(ti.Shape) != fmt.Sprint(want) {
						t.Errorf("%s shape %v, want %v", ti.Name, ti.Shape, want)
					}
					delete(shapes, ti.Name)
				}
				if len(shapes) != 0 {
					t.Errorf("missing tensors %v", shapes)
				}
				for key, want := range map[string]uint64{
					"llama.embedding_length": 64, "llama.feed_forward_length": 172, "llama.block_count": 5,
					"llama.attention.head_count": 8, "llama.attention.head_count_kv": 4,
				} {
					if got, err := f.Uint(key); err != nil || got != want {
						t.Errorf("%s = %d (%v), want %d", key, got, err, want)
					}
				}
				down, err := f.Tensor("blk.0.ffn_down.weight")
				if err != nil || down.RowLen() != 172 || down.Rows() != 64 {
					t.Errorf("blk.0.ffn_down.weight: %+v %v, want ne0 172, 64 rows", down, err)
				}
			}
		})
	}
}

func TestReadVocabKV(t *testing.T) {
	for file, n := range map[string]int{"ggml-vocab-llama-spm.gguf": 32000, "ggml-vocab-gpt-2.gguf": 50257} {
		f, err := Open(context.Background(), testfiles.Path(t, file))
		if err != nil {
			t.Fatal(err)
		}
		v, err := f.Get("tokenizer.ggml.tokens")
		if err != nil {
			t.Fatal(err)
		}
		toks, err := v.StringArray()
		if err != nil || len(toks) != n {
			t.Errorf("%s: %d tokens (%v), want %d", file, len(toks), err, n)
		}
		f.Close()
	}
	f, err := Open(context.Background(), testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if sep, err := f.Uint("tokenizer.ggml.seperator_token_id"); err != nil || sep != 0xFFFFFFFF {
		t.Errorf("seperator_token_id = %#x (%v)", sep, err)
	}
	if eps, err := f.Float("llama.attention.layer_norm_rms_epsilon"); err != nil || eps < 0.99e-5 || eps > 1.01e-5 {
		t.Errorf("rms eps %v (%v)", eps, err)
	}
	if _, err := f.Uint("no.such.key"); err == nil {
		t.Error("missing key: no error")
	}
	if _, err := f.String("llama.block_count"); err == nil {
		t.Error("String of a u32: no error")
	}
}

// TestRoundTrip reads every testdata GGUF and writes it back; the bytes must be identical.
func TestRoundTrip(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(testfiles.Dir(t), "*.gguf"))
	if len(files) < 7 { // SOURCES.md lists 13 today; fewer means a broken testdata folder
		t.Fatalf("found %d GGUF files in testdata, want at least 7", len(files))
	}
	for _, p := range files {
		t.Run(filepath.Base(p), func(t *testing.T) {
			ctx := context.Background()
			src, err := Open(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			out := filepath.Join(t.TempDir(), "out.gguf")
			w, err := os.Create(out)
			if err != nil {
				t.Fatal(err)
			}
			l, err := Write(ctx, w, src.Header(), CopyFrom(src))
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Size != src.Size || l.DataOffset != src.DataOffset {
				t.Errorf("layout size %d data %d, source %d %d", l.Size, l.DataOffset, src.Size, src.DataOffset)
			}
			if err := sameFiles(p, out); err != nil {
				t.Error(err)
			}
		})
	}
}

// sameFiles compares two files chunk by chunk.
func sameFiles(a, b string) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<16), make([]byte, 1<<16)
	for off := int64(0); ; {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			for i := 0; i < min(na, nb); i++ {
				if ba[i] != bb[i] {
					return fmt.Errorf("%s and %s differ at byte %d", a, b, off+int64(i))
				}
			}
			return fmt.Errorf("%s and %s differ in length near %d", a, b, off+int64(min(na, nb)))
		}
		off += int64(na)
		if ea != nil || eb != nil {
			return nil
		}
	}
}

// TestTensorless opens files without tensors (vocab-only GGUFs) as llama.cpp does: the data
// section is empty and starts right after the tensor infos, padded or not; the header region is
// hashable and the file re-encodes to the same header bytes.
func TestTensorless(t *testing.T) {
	unpadded := tensorless(t, false)
	cases := []struct {
		name string
		data func(t *testing.T) []byte
	}{
		{"generated", func(*testing.T) []byte { return unpadded }},
		{"generated-padded", func(t *testing.T) []byte { return tensorless(t, true) }},
		{"ggml-vocab-gpt-2.gguf", func(t *testing.T) []byte { return readFileT(t, testfiles.Path(t, "ggml-vocab-gpt-2.gguf")) }},
		{"ggml-vocab-llama-spm.gguf", func(t *testing.T) []byte { return readFileT(t, testfiles.Path(t, "ggml-vocab-llama-spm.gguf")) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			data := c.data(t)
			p := filepath.Join(t.TempDir(), "vocab.gguf")
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := Open(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if len(f.Tensors) != 0 {
				t.Fatalf("%d tensors, want none", len(f.Tensors))
			}
			l, hdr, err := Plan(f.Header())
			if err != nil {
				t.Fatal(err)
			}
			if f.DataOffset != int64(len(hdr)) || l.DataOffset != f.DataOffset || f.DataOffset > f.Size {
				t.Errorf("data offset %d, planned %d, header %d bytes, file %d", f.DataOffset, l.DataOffset, len(hdr), f.Size)
			}
			if !bytes.Equal(hdr, data[:len(hdr)]) {
				t.Error("header re-encodes differently")
			}
			got, err := f.HeaderDigest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := blake3.Sum256(data[:f.DataOffset]); got != want {
				t.Errorf("header digest %x, want %x", got, want)
			}
		})
	}
}

func readFileT(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
