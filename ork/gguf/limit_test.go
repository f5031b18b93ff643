package gguf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// sparseGGUF writes head to a file in a temporary directory and extends it with a hole to size
// bytes (os.Truncate), so that every "bytes left in the file" check passes at no disk cost.
func sparseGGUF(t *testing.T, head []byte, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sparse.gguf")
	if err := os.WriteFile(p, head, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
	return p
}

// openAlloc opens path and returns the bytes Open allocated and its error.
func openAlloc(t *testing.T, path string) (uint64, error) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f, err := Open(context.Background(), path)
	runtime.ReadMemStats(&after)
	if f != nil {
		f.Close()
	}
	return after.TotalAlloc - before.TotalAlloc, err
}

// TestSparseDeclaredSizes opens sparse files whose header declares huge values: the hole makes
// the declared bytes "present", so only MaxMetadataBytes and allocating as bytes are read keep
// parsing from allocating what the header declares. Reading by the declared counts, the cases
// allocated 320 MiB to 1.2 GiB (a u8 array of 12 Gi elements ran orkpipe inspect out of
// memory); each must now fail with an error naming the file, the field and the limit, having
// allocated under 64 MiB. The declared sizes stay at or under 512 MiB so that a reader without
// the bounds fails the test without exhausting the machine's memory.
func TestSparseDeclaredSizes(t *testing.T) {
	const hole = 600 << 20
	cases := []struct {
		name string
		head func(b *raw)
		want string
		sent error
	}{
		{"u8 array past the metadata limit", func(b *raw) {
			b.u64(0).u64(1).str("tokenizer.ggml.precompiled_charsmap").u32(uint32(ValueArray)).u32(uint32(ValueUint8)).u64(512 << 20)
		}, `value of key "tokenizer.ggml.precompiled_charsmap" element count 536870912 (at least 1 bytes each) needs 536870912 bytes, past the 268435456-byte limit`, ErrLimit},
		{"string past the metadata limit", func(b *raw) {
			b.u64(0).u64(2).str("a").u32(uint32(ValueUint32)).u32(7).str("tokenizer.chat_template").u32(uint32(ValueString)).u64(512 << 20)
		}, `value of key "tokenizer.chat_template" needs 536870912 bytes, past the 268435456-byte limit on the KV (metadata) section (gguf.MaxMetadataBytes; 52 bytes of it before this)`, ErrLimit},
		{"string array grows as read", func(b *raw) {
			// 20 Mi strings need at least 160 MiB, under the limit; the first one's length is
			// past the end of the file. Allocating the 20 Mi string headers first was 320 MiB.
			b.u64(0).u64(1).str("tokenizer.ggml.tokens").u32(uint32(ValueArray)).u32(uint32(ValueString)).u64(20 << 20).u64(1 << 40)
		}, `value of key "tokenizer.ggml.tokens"[0] length 1099511627776 is longer than the`, ErrFormat},
		{"tensor name refused unread", func(b *raw) {
			b.u64(1).u64(0).u64(32 << 20)
		}, "tensor info 0: name is too long (33554432 bytes, the limit is 63)", ErrFormat},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := &raw{}
			b.WriteString(Magic)
			b.u32(Version)
			tc.head(b)
			p := sparseGGUF(t, b.Bytes(), hole)
			alloc, err := openAlloc(t, p)
			msg := fmt.Sprint(err)
			if len(msg) > 1000 { // a name read whole was quoted in the message
				msg = fmt.Sprintf("%s... (%d bytes)", msg[:1000], len(msg))
			}
			t.Logf("allocated %d bytes: %s", alloc, msg)
			if err == nil || !errors.Is(err, tc.sent) || !strings.Contains(msg, tc.want) || !strings.Contains(msg, p) {
				t.Errorf("error %s\nwant %v containing %q and the file name", msg, tc.sent, tc.want)
			}
			if alloc > 64<<20 {
				t.Errorf("parsing the header of a sparse file allocated %d MiB", alloc>>20)
			}
		})
	}
}
