package pack

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// recordAt returns where the 176 fixed bytes of entry i's record sit in the pack b.
func recordAt(b []byte, i int) int {
	p := int(le.Uint64(b[24:]))
	p += indexHeaderSize + int(le.Uint16(b[p+12:]))
	for ; i > 0; i-- {
		p += 2 + int(le.Uint16(b[p:])) + recordFixed
	}
	return p + 2 + int(le.Uint16(b[p:]))
}

// TestRotationAndGroupRules: the reader refuses, in a pack of any version, an entry the quantizer cannot
// make nor the emulation compute (docs/orkpack.md 3): a rotation block that does not divide K (the
// rotated K is padded to a multiple of it; crafted/rotblock128.orkpack, rotblock16777216.orkpack), a
// block below 32 or not a power of two, and a group size other than 0, 32, 64, 128, 256 or 512
// (crafted/group16m.orkpack: 2^24, larger than K, the same scales as per channel). A group larger than
// K (one partial group) and a smaller block dividing K stay valid. Each case is patched into a fixture's
// record and resealed.
func TestRotationAndGroupRules(t *testing.T) {
	seeds := fuzzSeeds(t)
	one := expandZeros(seeds["one"])         // I4_ROT_A8 K=64 N=20 G=32, block 64
	v1 := expandZeros(seeds["v1-one"])       // the same, version 1
	clipped := expandZeros(seeds["clipped"]) // entry 1: I8_ROT K=64 N=32 G=0, block 64
	for _, c := range []struct {
		name  string
		pack  []byte
		entry int
		field int // record byte offset: 32 group, 36 rotation block
		value uint32
		want  string // "" = accepted
	}{
		{"block 128, K 64", one, 0, 36, 128, `entry "blk.0.w#3": hadamard block 128 does not divide K = 64`},
		{"block 2^24, K 64", one, 0, 36, 1 << 24, "hadamard block 16777216 does not divide K = 64"},
		{"v1 block 128, K 64", v1, 0, 36, 128, "hadamard block 128 does not divide K = 64"},
		{"block 16", one, 0, 36, 16, "hadamard block 16: want a power of two from 32 to 16777216"},
		{"block 48", one, 0, 36, 48, "hadamard block 48: want a power of two"},
		{"block 32", one, 0, 36, 32, ""},
		{"group 2^24, K 64", clipped, 1, 32, 1 << 24, `entry "c.1": group 16777216: want 0 (per channel), 32, 64, 128, 256 or 512`},
		{"group 96", one, 0, 32, 96, "group 96: want 0 (per channel), 32, 64, 128, 256 or 512"},
		{"group 512, K 64", clipped, 1, 32, 512, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte(nil), c.pack...)
			le.PutUint32(b[recordAt(b, c.entry)+c.field:], c.value)
			s, ok := reseal(b)
			if !ok {
				t.Fatal("reseal failed")
			}
			r, err := NewReader(context.Background(), bytesReaderAt(s), int64(len(s)), "patched.orkpack")
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := r.VerifyAll(context.Background()); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrIndex with %q", err, c.want)
			}
		})
	}
}
