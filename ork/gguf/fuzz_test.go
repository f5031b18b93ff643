package gguf

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

var genSeeds = flag.Bool("gen-fuzz-seeds", false, "regenerate the small generated seeds in testdata/fuzz/FuzzRead")

// FuzzRead parses arbitrary bytes. It must never panic or hang, must allocate at most a small
// constant factor of the input size, and anything it accepts must re-encode to the same header
// bytes and survive dequantizing its first rows. Seeds: the small generated files in
// testdata/fuzz/FuzzRead plus, at run time, the shared testdata GGUFs (never copied here).
// The shared files (0.3-3 MB) are regression seeds only: under -fuzz they are left out, because
// the engine minimizes every new interesting input for up to -fuzzminimizetime (60 s by default),
// and on a multi-megabyte input that spends a whole -fuzztime 60s run minimizing and ends it with
// "context deadline exceeded" after a few hundred executions.
func FuzzRead(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(testfiles.Dir(f), "*.gguf"))
	if fz := flag.Lookup("test.fuzz"); fz != nil && fz.Value.String() != "" {
		files = nil
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		file, err := Parse(context.Background(), bytes.NewReader(data), int64(len(data)), "fuzz.gguf")
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64*uint64(len(data))+(1<<20) {
			t.Fatalf("parsing %d bytes allocated %d", len(data), alloc)
		}
		if err != nil {
			return
		}
		if _, err := file.HeaderDigest(context.Background()); err != nil {
			t.Fatalf("accepted file's header region cannot be hashed: %v", err)
		}
		_, hdr, err := Plan(file.Header())
		if err != nil {
			t.Fatalf("accepted file does not plan: %v", err)
		}
		if !bytes.Equal(hdr, data[:len(hdr)]) {
			t.Fatalf("accepted header re-encodes differently (%d bytes)", len(hdr))
		}
		if no, count, err := file.Shard(); err == nil && (count == 1 || count > 0 && (no < 0 || no >= count)) {
			t.Fatalf("Shard: %d of %d", no, count)
		}
		for _, ti := range file.Tensors {
			if !CanDequantize(ti.Type) || ti.RowLen() > 1<<16 {
				continue
			}
			row := make([]float32, ti.RowLen())
			if err := file.ReadRows(context.Background(), ti, 0, row); err != nil {
				t.Fatalf("tensor %q inside the file cannot be read: %v", ti.Name, err)
			}
		}
	})
}

// TestGenerateFuzzSeeds writes the small generated seed corpus when run with -gen-fuzz-seeds;
// otherwise it checks that every checked-in seed still parses or fails cleanly.
func TestGenerateFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzRead")
	if *genSeeds {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range seedFiles(t) {
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) < 5 {
		t.Fatalf("seed corpus %s: %d entries, %v (run with -gen-fuzz-seeds)", dir, len(entries), err)
	}
}

// seedFiles builds small, valid and nearly valid GGUFs covering every value type and a few
// tensor types.
func seedFiles(t *testing.T) map[string][]byte {
	seeds := map[string][]byte{}
	g := valid()
	seeds["valid-raw"] = g.build()
	g.tensors[1].offset = 288
	seeds["offset-gap"] = g.build()
	var buf bytes.Buffer
	h := Header{KV: []KV{
		{"general.architecture", String("llama")}, {"u8", Uint8(1)}, {"i8", Int8(-1)}, {"u16", Uint16(2)},
		{"i16", Int16(-2)}, {"u32", Uint32(3)}, {"i32", Int32(-3)}, {"f32", Float32(0.5)}, {"b", Bool(true)},
		{"u64", Uint64(4)}, {"i64", Int64(-4)}, {"f64", Float64(0.25)}, {"strs", Strings([]string{"a", "bc"})},
		{"f32s", Float32s([]float32{1, 2})}, {"i32s", Int32s([]int32{-1, 1})}, {"bools", Bools([]bool{true, false})},
		{AlignmentKey, Uint32(64)},
	}, Tensors: []TensorInfo{
		{Name: "q8", Type: TypeQ8_0, Shape: []int64{32, 2}},
		{Name: "q4k", Type: TypeQ4_K, Shape: []int64{256}},
		{Name: "q6k", Type: TypeQ6_K, Shape: []int64{256}},
		{Name: "f16", Type: TypeF16, Shape: []int64{4, 1, 1, 1}},
		{Name: "q5_1", Type: TypeQ5_1, Shape: []int64{32}},
	}}
	_, err := Write(context.Background(), &buf, h, func(_ context.Context, i int, ti TensorInfo, w io.Writer) error {
		b := make([]byte, ti.Size)
		for j := range b {
			b[j] = byte(j*31 + i)
		}
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	seeds["all-value-types"] = buf.Bytes()
	seeds["all-value-types-truncated"] = buf.Bytes()[:buf.Len()-100]
	seeds["header-only"] = buf.Bytes()[:24]
	seeds["tensorless"] = tensorless(t, false)
	seeds["tensorless-padded"] = tensorless(t, true)
	// The readers' bounded paths: a string read readChunk at a time, a tensor name refused by its
	// length unread, a string array whose first element is past the end (TestSparseDeclaredSizes
	// has the sparse files themselves, too large for seeds).
	g = valid()
	g.kv = append(g.kv, func(b *raw) { b.str("long").u32(uint32(ValueString)).str(strings.Repeat("x", readChunk+100)) })
	seeds["long-string"] = g.build()
	g = valid()
	g.tensors[1].name = strings.Repeat("n", maxQuotedName+1)
	seeds["long-tensor-name"] = g.build()
	g = valid()
	g.kv = append(g.kv, func(b *raw) { b.str("arr").u32(uint32(ValueArray)).u32(uint32(ValueString)).u64(40).u64(1 << 40) })
	seeds["string-array-past-end"] = g.build()
	return seeds
}

// tensorless returns a small GGUF without tensors (a vocab-only file): the header and KV, ending
// right after them as vocab files do, or padded to the alignment as llama.cpp's writer pads.
func tensorless(t testing.TB, padded bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	h := Header{KV: []KV{
		{"general.architecture", String("llama")}, {"tokenizer.ggml.model", String("gpt2")},
		{"tokenizer.ggml.tokens", Strings([]string{"a", "b", "ab"})}, {"tokenizer.ggml.merges", Strings([]string{"a b"})},
	}}
	if _, err := Write(context.Background(), &buf, h, nil); err != nil {
		t.Fatal(err)
	}
	if padded {
		buf.Write(make([]byte, alignUp(int64(buf.Len()), DefaultAlignment)-int64(buf.Len())))
	}
	return buf.Bytes()
}
