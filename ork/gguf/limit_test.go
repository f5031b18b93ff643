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

	"orkpipe/internal/testfiles"
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
// the declared bytes "present", so only MaxMetadataBytes, MaxTensors and allocating as bytes are
// read keep parsing from allocating what the header declares. Reading by the declared counts, the cases
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
		{"tensor count past the limit, refused unread", func(b *raw) {
			b.u64(MaxTensors + 1).u64(0) // 262,145 tensor infos declared, the hole standing for them
		}, fmt.Sprintf("offset 8: tensor count %d is past the limit of %d tensors (gguf.MaxTensors)", MaxTensors+1, MaxTensors), ErrLimit},
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

// tensorTable returns the header of a GGUF of n F32 tensors of one value each, shaped dims, named
// by name and laid out one after the other (offsets i·32), without KV pairs: every tensor info is
// real bytes, only the data section is left to a hole.
func tensorTable(n int, name func(i int) string, dims []uint64) []byte {
	b := &raw{}
	b.WriteString(Magic)
	b.u32(Version)
	b.u64(uint64(n)).u64(0)
	for i := range n {
		b.str(name(i)).u32(uint32(len(dims)))
		for _, d := range dims {
			b.u64(d)
		}
		b.u32(uint32(TypeF32)).u64(uint64(i) * DefaultAlignment)
	}
	return b.Bytes()
}

// TestTensorInfoLimits opens files whose tensor-info table is real bytes, not a hole, past
// MaxTensors (262,145 infos of 38 bytes, 9.5 MB) and past MaxTensorInfoBytes (140,986 infos of
// 119 bytes: 63-byte names, 4 dims). Without the limits both parsed: the table was decoded whole,
// however large, nothing but the file's size bounding it. Now the count is refused as it is read,
// before any tensor info is (having allocated under 1 MiB), and the table as the info that would
// pass the byte limit is read, having allocated for the infos before it only (52 MB: under four
// times the limit).
func TestTensorInfoLimits(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "writes and parses 27 MB of tensor infos (0.6 s; 4.6 s under qemu-aarch64); the sparse count case of TestSparseDeclaredSizes runs")
	}
	cases := []struct {
		name     string
		n        int
		tname    func(i int) string
		dims     []uint64
		want     string
		maxAlloc uint64
	}{
		{"tensor count past MaxTensors", MaxTensors + 1, func(i int) string { return fmt.Sprintf("t%05x", i) }, []uint64{1},
			fmt.Sprintf("offset 8: tensor count %d is past the limit of %d tensors (gguf.MaxTensors)", MaxTensors+1, MaxTensors), 1 << 20},
		{"tensor-info table past MaxTensorInfoBytes", MaxTensorInfoBytes/119 + 1, func(i int) string { return fmt.Sprintf("%063x", i) }, []uint64{1, 1, 1, 1},
			fmt.Sprintf("tensor info %d name length needs 8 bytes, past the %d-byte limit on the tensor-info table (gguf.MaxTensorInfoBytes; %d bytes of it before this)",
				MaxTensorInfoBytes/119, MaxTensorInfoBytes, MaxTensorInfoBytes/119*119), 4 * MaxTensorInfoBytes},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			head := tensorTable(tc.n, tc.tname, tc.dims)
			data := alignUp(int64(len(head)), DefaultAlignment)
			p := sparseGGUF(t, head, data+int64(tc.n)*DefaultAlignment)
			alloc, err := openAlloc(t, p)
			t.Logf("table of %d bytes: allocated %d bytes: %v", len(head)-24, alloc, err)
			if err == nil || !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %v\nwant ErrLimit containing %q and the file name", err, tc.want)
			}
			if alloc > tc.maxAlloc {
				t.Errorf("refusing the table allocated %d bytes, want at most %d", alloc, tc.maxAlloc)
			}
		})
	}
}
