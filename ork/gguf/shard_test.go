package gguf

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShard: a file without split.count, or with a count of 1, is whole; a shard gives its number
// and the count, as llama-gguf-split writes them (u16); a number not below the count, or keys of
// another type, are format errors naming the key.
func TestShard(t *testing.T) {
	for _, c := range []struct {
		name      string
		kv        []KV
		no, count int
		err       string
	}{
		{"whole", nil, 0, 0, ""},
		{"count 1", []KV{{SplitNoKey, Uint16(0)}, {SplitCountKey, Uint16(1)}}, 0, 0, ""},
		{"first of 3", []KV{{SplitNoKey, Uint16(0)}, {SplitCountKey, Uint16(3)}, {"split.tensors.count", Int32(9)}}, 0, 3, ""},
		{"last of 3", []KV{{SplitNoKey, Uint16(2)}, {SplitCountKey, Uint16(3)}}, 2, 3, ""},
		{"number past the count", []KV{{SplitNoKey, Uint16(3)}, {SplitCountKey, Uint16(3)}}, 0, 0, `key "split.no" = 3`},
		{"no number", []KV{{SplitCountKey, Uint16(2)}}, 0, 0, `"split.no"`},
		{"count a string", []KV{{SplitNoKey, Uint16(0)}, {SplitCountKey, String("2")}}, 0, 0, `"split.count"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			kv := append([]KV{{"general.architecture", String("llama")}}, c.kv...)
			if _, err := Write(context.Background(), &b, Header{KV: kv}, nil); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "shard.gguf")
			if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := Open(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			no, count, err := f.Shard()
			if c.err != "" {
				if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), p) {
					t.Errorf("Shard: %d, %d, %v; want ErrFormat naming %s and the file", no, count, err, c.err)
				}
				return
			}
			if err != nil || no != c.no || count != c.count {
				t.Errorf("Shard: %d, %d, %v; want %d, %d", no, count, err, c.no, c.count)
			}
		})
	}
}
