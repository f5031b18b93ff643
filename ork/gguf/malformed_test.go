package gguf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// raw builds GGUF bytes field by field so tests can break any rule.
type raw struct{ bytes.Buffer }

func (b *raw) u32(x uint32) *raw { binary.Write(&b.Buffer, binary.LittleEndian, x); return b }
func (b *raw) u64(x uint64) *raw { binary.Write(&b.Buffer, binary.LittleEndian, x); return b }
func (b *raw) str(s string) *raw { b.u64(uint64(len(s))); b.WriteString(s); return b }

type rawTensor struct {
	name   string
	dims   []uint64
	typ    Type
	offset uint64
}

// rawGGUF describes a small file; build encodes it.
type rawGGUF struct {
	magic    string
	version  uint32
	nTensors *uint64 // override the count
	nKV      *uint64
	kv       []func(*raw) // each writes one KV pair
	tensors  []rawTensor
	data     int // bytes of data section after padding
	cut      int // bytes to drop from the end
}

func (g rawGGUF) build() []byte {
	b := &raw{}
	b.WriteString(g.magic)
	b.u32(g.version)
	nt, nkv := uint64(len(g.tensors)), uint64(len(g.kv))
	if g.nTensors != nil {
		nt = *g.nTensors
	}
	if g.nKV != nil {
		nkv = *g.nKV
	}
	b.u64(nt).u64(nkv)
	for _, kv := range g.kv {
		kv(b)
	}
	for _, t := range g.tensors {
		b.str(t.name).u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			b.u64(d)
		}
		b.u32(uint32(t.typ)).u64(t.offset)
	}
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	b.Write(make([]byte, g.data))
	out := b.Bytes()
	return out[:len(out)-g.cut]
}

func kvU32(key string, v uint32) func(*raw) {
	return func(b *raw) { b.str(key).u32(uint32(ValueUint32)).u32(v) }
}

func valid() rawGGUF {
	return rawGGUF{magic: "GGUF", version: 3,
		kv: []func(*raw){kvU32("a.b", 1), func(b *raw) { b.str("general.name").u32(uint32(ValueString)).str("x") }},
		tensors: []rawTensor{
			{"w", []uint64{32, 2}, TypeF32, 0},        // 256 bytes
			{"v", []uint64{64}, TypeQ8_0, 256},        // 68 bytes, padded to 96
			{"z", []uint64{8, 1, 1, 1}, TypeF16, 352}, // 16 bytes
		},
		data: 256 + 96 + 32}
}

func u64p(x uint64) *uint64 { return &x }

func TestMalformed(t *testing.T) {
	cases := []struct {
		name string
		mod  func(g *rawGGUF)
		want string // substring the error must contain, naming the rule
		sent error
	}{
		{"valid", func(g *rawGGUF) {}, "", nil},
		{"bad magic", func(g *rawGGUF) { g.magic = "GGML" }, "bad magic", ErrFormat},
		{"version 0", func(g *rawGGUF) { g.version = 0 }, "version 0 is invalid", ErrVersion},
		{"version 1", func(g *rawGGUF) { g.version = 1 }, "v1 is no longer supported", ErrVersion},
		{"version 4", func(g *rawGGUF) { g.version = 4 }, "newer than supported", ErrVersion},
		{"byte-swapped", func(g *rawGGUF) { g.version = 0x03000000 }, "byte-swapped", ErrVersion},
		{"truncated header", func(g *rawGGUF) { g.tensors, g.data, g.cut = nil, 0, 30 }, "truncated: type of key \"general.name\" needs 4 bytes, only 3 left", ErrFormat},
		{"tensor count beyond file", func(g *rawGGUF) { g.nTensors = u64p(1 << 40) }, "tensor count 1099511627776 is larger than", ErrFormat},
		{"kv count beyond file", func(g *rawGGUF) { g.nKV = u64p(1 << 62) }, "KV count", ErrFormat},
		{"duplicate key", func(g *rawGGUF) { g.kv = append(g.kv, kvU32("a.b", 2)) }, `duplicate key "a.b"`, ErrFormat},
		{"empty key", func(g *rawGGUF) { g.kv = append(g.kv, kvU32("", 2)) }, "empty key", ErrFormat},
		{"string past end", func(g *rawGGUF) {
			g.kv = append(g.kv, func(b *raw) { b.str("s").u32(uint32(ValueString)).u64(1 << 50) })
		}, `value of key "s" length 1125899906842624 is longer than the`, ErrFormat},
		{"array past end", func(g *rawGGUF) {
			g.kv = append(g.kv, func(b *raw) { b.str("arr").u32(uint32(ValueArray)).u32(uint32(ValueUint32)).u64(1 << 40) })
		}, `value of key "arr" element count 1099511627776 is larger than`, ErrFormat},
		{"nested array", func(g *rawGGUF) {
			g.kv = append(g.kv, func(b *raw) { b.str("arr").u32(uint32(ValueArray)).u32(uint32(ValueArray)).u64(0) })
		}, "nested arrays are not allowed", ErrFormat},
		{"unknown value type", func(g *rawGGUF) {
			g.kv = append(g.kv, func(b *raw) { b.str("k").u32(13).u32(0) })
		}, `key "k" has unknown value type 13`, ErrFormat},
		{"unknown array element type", func(g *rawGGUF) {
			g.kv = append(g.kv, func(b *raw) { b.str("arr").u32(uint32(ValueArray)).u32(77).u64(0) })
		}, "unknown array element type 77", ErrFormat},
		{"alignment not u32", func(g *rawGGUF) {
			g.kv = append(g.kv, func(b *raw) { b.str(AlignmentKey).u32(uint32(ValueUint64)).u64(32) })
		}, "general.alignment is u64, expected u32", ErrFormat},
		{"alignment not power of two", func(g *rawGGUF) { g.kv = append(g.kv, kvU32(AlignmentKey, 48)) }, "= 48 is not a power of two", ErrFormat},
		{"alignment zero", func(g *rawGGUF) { g.kv = append(g.kv, kvU32(AlignmentKey, 0)) }, "= 0 is not a power of two", ErrFormat},
		{"tensor name too long", func(g *rawGGUF) { g.tensors[1].name = strings.Repeat("n", 64) }, "is too long (64 bytes, the limit is 63)", ErrFormat},
		{"duplicate tensor name", func(g *rawGGUF) { g.tensors[1].name = "w" }, `duplicate tensor name "w"`, ErrFormat},
		{"too many dims", func(g *rawGGUF) { g.tensors[2].dims = []uint64{8, 1, 1, 1, 1} }, "n_dims 5, more than 4", ErrFormat},
		{"zero dim", func(g *rawGGUF) { g.tensors[0].dims = []uint64{32, 0} }, "invalid ne[1] = 0", ErrFormat},
		{"negative dim", func(g *rawGGUF) { g.tensors[0].dims = []uint64{32, 1 << 63} }, "invalid ne[1]", ErrFormat},
		{"element count overflow", func(g *rawGGUF) { g.tensors[0].dims = []uint64{1 << 32, 1 << 32} }, "element count of shape", ErrFormat},
		{"byte size overflow", func(g *rawGGUF) { g.tensors[0].dims = []uint64{1 << 31, 1 << 30} }, "byte size of", ErrFormat},
		{"row byte size overflow", func(g *rawGGUF) { g.tensors[0].dims = []uint64{3 << 60} }, "byte size of", ErrFormat},
		{"unknown type", func(g *rawGGUF) { g.tensors[1].typ = 99 }, `tensor "v" has unknown ggml type 99`, ErrFormat},
		{"removed type", func(g *rawGGUF) { g.tensors[1].typ = 4 }, `tensor "v" has removed ggml type 4`, ErrFormat},
		{"removed type 36", func(g *rawGGUF) { g.tensors[1].typ = 36 }, "removed ggml type 36 (IQ4_NL_4_4", ErrFormat},
		{"row not block multiple", func(g *rawGGUF) { g.tensors[1].dims = []uint64{48} }, "ne[0] = 48, not a multiple of the block size 32", ErrFormat},
		{"offset gap", func(g *rawGGUF) { g.tensors[1].offset = 288 }, `tensor "v" (info 1) has offset 288, expected 256`, ErrFormat},
		{"offset overlap", func(g *rawGGUF) { g.tensors[2].offset = 300 }, "overlap or reordering", ErrFormat},
		{"offsets reordered", func(g *rawGGUF) { g.tensors[0].offset, g.tensors[1].offset = 256, 0 }, "expected 0", ErrFormat},
		{"unaligned offset", func(g *rawGGUF) { g.tensors[2].offset = 324 }, "has offset 324, expected 352", ErrFormat},
		{"data past end", func(g *rawGGUF) { g.cut = 32 + 1 }, `tensor "z" data [576, 592) is past the end of the file`, ErrFormat},
		{"last padding may be absent", func(g *rawGGUF) { g.cut = 32 - 16 }, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := valid()
			tc.mod(&g)
			b := g.build()
			f, err := Parse(context.Background(), bytes.NewReader(b), int64(len(b)), "bad.gguf")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if len(f.Tensors) != 3 || f.DataOffset%32 != 0 {
					t.Fatalf("parsed %d tensors, data offset %d", len(f.Tensors), f.DataOffset)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad.gguf") {
				t.Errorf("error %q\nwant it to contain %q and the file name", err, tc.want)
			}
			if !errors.Is(err, tc.sent) {
				t.Errorf("error %v does not wrap %v", err, tc.sent)
			}
		})
	}
}
