package model

import (
	"context"
	"io"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// FuzzConfigFromGGUF reads the shared models with their shape keys set to arbitrary values (and
// tensors dropped) as ConfigFromGGUF and CheckTensors do at plan time and in inspect: each must
// return, with an error or a config whose tensors the file holds, never panic, and never size
// anything by a key the file's tensors do not bear out (a block_count of 2e9 once ran out of memory).
func FuzzConfigFromGGUF(f *testing.F) {
	var headers []gguf.Header
	for _, name := range []string{"tiny-qwen35.gguf", "tiny-lfm2moe.gguf", "stories260K.gguf"} {
		src, err := gguf.Open(context.Background(), testfiles.Path(f, name))
		if err != nil {
			f.Fatal(err)
		}
		headers = append(headers, src.Header())
		src.Close()
	}
	keys := []string{"block_count", "embedding_length", "feed_forward_length", "attention.head_count",
		"attention.head_count_kv", "attention.key_length", "nextn_predict_layers", "expert_count",
		"expert_used_count", "full_attention_interval", "ssm.group_count", "ssm.time_step_rank"}
	f.Add(uint8(0), uint8(0), uint32(8), uint64(0))
	f.Add(uint8(0), uint8(0), uint32(2_000_000_000), uint64(0))
	f.Add(uint8(1), uint8(7), uint32(1<<20), uint64(1))
	f.Add(uint8(2), uint8(3), uint32(0), uint64(1<<40))
	f.Add(uint8(0), uint8(6), uint32(7), uint64(0))
	f.Fuzz(func(t *testing.T, model, key uint8, value uint32, drop uint64) {
		h := headers[int(model)%len(headers)]
		arch := ""
		for _, kv := range h.KV {
			if kv.Key == "general.architecture" {
				arch, _ = kv.Value.Interface().(string)
			}
		}
		name := arch + "." + keys[int(key)%len(keys)]
		kvs := make([]gguf.KV, 0, len(h.KV)+1)
		set := false
		for _, kv := range h.KV {
			if kv.Key == name {
				kv.Value, set = gguf.Uint32(value), true
			}
			kvs = append(kvs, kv)
		}
		if !set {
			kvs = append(kvs, gguf.KV{Key: name, Value: gguf.Uint32(value)})
		}
		var ts []gguf.TensorInfo
		for i, ti := range h.Tensors {
			if i >= 64 || drop&(1<<i) == 0 { // drop: a bit per tensor among the first 64
				ts = append(ts, ti)
			}
		}
		l, hdr, err := gguf.Plan(gguf.Header{Version: h.Version, KV: kvs, Tensors: ts})
		if err != nil {
			t.Fatal(err)
		}
		file, err := gguf.Parse(context.Background(), zerosAfter(hdr), l.Size, "fuzz.gguf")
		if err != nil {
			t.Fatal(err)
		}
		c, err := ConfigFromGGUF(file)
		if err != nil {
			return
		}
		if err := c.CheckTensors(file); err != nil {
			return
		}
		if c.NLayer+c.NextN > len(file.Tensors) || c.NVocab <= 0 {
			t.Fatalf("%s = %d: config %d blocks + %d, vocabulary %d from %d tensors", name, value, c.NLayer, c.NextN, c.NVocab, len(file.Tensors))
		}
	})
}

// zerosAfter is a file of the header bytes hdr followed by zeros (tensor data of any length).
type zerosAfter []byte

func (z zerosAfter) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, io.EOF
	}
	n := 0
	if off < int64(len(z)) {
		n = copy(p, z[off:])
	}
	clear(p[n:])
	return len(p), nil
}
