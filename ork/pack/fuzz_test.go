package pack

import (
	"bytes"
	"context"
	"testing"

	"github.com/zeebo/blake3"
)

// FuzzOpen feeds arbitrary bytes to the reader: the input as given, and the input with zero runs expanded
// (packs are mostly page padding, so seeds are stored compactly and the fuzzer mutates and minimizes small
// inputs); each of the two also resealed, i.e. with the header checksum, footer checksum, index digest and
// total length recomputed so that mutations reach the index parser and the entry decoder. The reader must
// return an error or a pack whose entries verify or fail cleanly: never panic, hang, or allocate beyond the
// input's size. Seeds: testdata/fuzz/FuzzOpen (regenerate with go test -run TestFuzzSeeds -update).
func FuzzOpen(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, expandZeros(b)} {
			open(in)
			if sealed, ok := reseal(in); ok {
				open(sealed)
			}
		}
	})
}

// expandZeros undoes the seeds' compact form: 0xFE c expands to c*32 zero bytes (0xFE 0x00 is a literal
// 0xFE); every other byte is itself. The output is capped at 4 MiB.
func expandZeros(in []byte) []byte {
	var out []byte
	for i := 0; i < len(in) && len(out) < 4<<20; i++ {
		if in[i] != 0xfe || i+1 == len(in) {
			out = append(out, in[i])
			continue
		}
		i++
		if in[i] == 0 {
			out = append(out, 0xfe)
		} else {
			out = append(out, make([]byte, 32*int(in[i]))...)
		}
	}
	return out
}

func open(b []byte) {
	ctx := context.Background()
	r, err := NewReader(ctx, bytes.NewReader(b), int64(len(b)), "fuzz")
	if err != nil {
		return
	}
	_ = r.VerifyAll(ctx)
}

// reseal recomputes what protects the index, keeping the version (when supported), the index offset and
// length the header claims.
func reseal(in []byte) ([]byte, bool) {
	if len(in) < HeaderSize+indexHeaderSize+FooterSize {
		return nil, false
	}
	b := append([]byte(nil), in...)
	version := le.Uint32(b[8:])
	if !Supported(version) {
		version = Version
	}
	t := trailer{
		version:     version,
		indexOffset: int64(le.Uint64(b[24:])),
		indexLength: int64(le.Uint64(b[32:])),
		count:       le.Uint32(b[72:]),
		total:       int64(len(b)),
	}
	if t.indexOffset < HeaderSize || t.indexLength < 0 || t.indexOffset+t.indexLength+FooterSize != t.total {
		t.indexOffset = t.total - FooterSize - t.indexLength
		if t.indexOffset < HeaderSize || t.indexLength < 0 {
			return nil, false
		}
	}
	t.indexDigest = blake3.Sum256(b[t.indexOffset : t.indexOffset+t.indexLength])
	copy(b, encodeHeader(t))
	copy(b[t.total-FooterSize:], encodeFooter(t))
	return b, true
}

// validSeeds are the FuzzOpen seeds that are valid packs of the current version (TestFuzzSeeds -update
// regenerates them); oldSeeds are valid packs of earlier versions, kept byte for byte as those writers made
// them ("v1-*" by the package at 724f2df^, before version 2; "v2-*" at 9f26c23^, before version 3): the
// fuzzer reaches the older record and index decoding through them, and TestReadOldVersions reads them.
// v1-one, v2-one, v2-two and v2-clipped were written again by those same writers when the reader began
// refusing a rotation block that does not divide K: the test helper of the time had given K = 40, 32 and
// 64 blocks of 64 to 256, which no quantizer makes (quantized now pads and picks the block as it does).
var (
	validSeeds = []string{"one", "two", "empty", "clipped", "resident"}
	oldSeeds   = map[uint32][]string{1: {"v1-one", "v1-two", "v1-empty"}, 2: {"v2-one", "v2-two", "v2-empty", "v2-clipped"}}
)

// TestResealSeeds: resealing a valid pack (of either version) changes nothing, so the fuzzer's second path
// starts from valid packs.
func TestResealSeeds(t *testing.T) {
	seeds := fuzzSeeds(t)
	for _, name := range append(append(validSeeds, oldSeeds[1]...), oldSeeds[2]...) {
		c, ok := seeds[name]
		if !ok {
			t.Fatalf("seed %s missing (run TestFuzzSeeds with -update)", name)
		}
		b := expandZeros(c)
		s, ok := reseal(b)
		if !ok || !bytes.Equal(s, b) {
			t.Fatalf("seed %s: reseal changed a valid pack", name)
		}
		if _, err := NewReader(context.Background(), bytes.NewReader(b), int64(len(b)), name); err != nil {
			t.Fatalf("seed %s: %v", name, err)
		}
	}
}
