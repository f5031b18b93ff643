package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

func TestInspectGGUFText(t *testing.T) {
	var out bytes.Buffer
	opts := newGlobalOptions(&out, &out)
	if err := runInspectGGUF(context.Background(), opts, testfiles.Path(t, "stories260K.gguf")); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"GGUF v3, alignment 32, 19 KV, 48 tensors, data offset 14176, 1185376 bytes",
		"llama.embedding_length", "tokenizer.ggml.tokens", "[]string", "[string; 512]",
		"blk.0.ffn_down.weight", "[172 64]",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestInspectGGUFJSON(t *testing.T) {
	var out bytes.Buffer
	opts := newGlobalOptions(&out, &out)
	opts.json = true
	if err := runInspectGGUF(context.Background(), opts, testfiles.Path(t, "stories260K-Q8_0.gguf")); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Version   int                        `json:"version"`
		Alignment int                        `json:"alignment"`
		KV        map[string]json.RawMessage `json:"kv"`
		Tensors   []struct {
			Name   string  `json:"name"`
			Type   string  `json:"type"`
			Shape  []int64 `json:"shape"`
			Offset uint64  `json:"offset"`
			Bytes  int64   `json:"bytes"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got.Version != 3 || got.Alignment != 32 || len(got.KV) != 21 || len(got.Tensors) != 48 {
		t.Fatalf("version %d alignment %d kv %d tensors %d", got.Version, got.Alignment, len(got.KV), len(got.Tensors))
	}
	if s := string(got.KV["llama.block_count"]); s != "5" {
		t.Errorf("llama.block_count = %s", s)
	}
	if s := string(got.KV["general.architecture"]); s != `"llama"` {
		t.Errorf("general.architecture = %s", s)
	}
	var arr struct {
		Type, ElemType string
		Len            int
	}
	if err := json.Unmarshal(got.KV["tokenizer.ggml.tokens"], &arr); err != nil || arr.Len != 512 {
		t.Errorf("tokens = %s (%v)", got.KV["tokenizer.ggml.tokens"], err)
	}
	if !strings.Contains(string(got.KV["tokenizer.ggml.tokens"]), `"elem_type":"string"`) {
		t.Errorf("tokens = %s", got.KV["tokenizer.ggml.tokens"])
	}
	for _, ti := range got.Tensors {
		if ti.Name == "blk.0.attn_q.weight" && (ti.Type != "Q8_0" || ti.Bytes != 64*64/32*34 || len(ti.Shape) != 2) {
			t.Errorf("attn_q: %+v", ti)
		}
	}
	// The KV object keeps file order.
	var raw struct {
		KV json.RawMessage `json:"kv"`
	}
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw.KV))
	var keys []string
	dec.Token() // {
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	f, err := gguf.Open(context.Background(), testfiles.Path(t, "stories260K-Q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, kv := range f.KV {
		if i >= len(keys) || keys[i] != kv.Key {
			t.Fatalf("kv key %d: JSON has %v, file has %q", i, keys, kv.Key)
		}
	}
}

func TestInspectGGUFErrors(t *testing.T) {
	var out bytes.Buffer
	opts := newGlobalOptions(&out, &out)
	err := runInspectGGUF(context.Background(), opts, testfiles.Path(t, "stories-calib.txt"))
	if err == nil || !strings.Contains(err.Error(), "bad magic") || !strings.Contains(err.Error(), "stories-calib.txt") {
		t.Errorf("err = %v", err)
	}
}

// TestInspectGGUFShard: inspect of one shard of a split model says which shard it is and that builds
// read the merged file.
func TestInspectGGUFShard(t *testing.T) {
	var b bytes.Buffer
	kv := []gguf.KV{{Key: "general.architecture", Value: gguf.String("qwen35")},
		{Key: gguf.SplitNoKey, Value: gguf.Uint16(1)}, {Key: gguf.SplitCountKey, Value: gguf.Uint16(3)}}
	if _, err := gguf.Write(context.Background(), &b, gguf.Header{KV: kv}, nil); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "m-00002-of-00003.gguf")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := orkpipeExit(t, "inspect", p)
	if code != 0 || !strings.Contains(out, "split: shard 2 of 3 of a model split across files") {
		t.Errorf("inspect: exit %d:\n%s%s", code, out, stderr)
	}
}
