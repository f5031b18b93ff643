package pack

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestResidencySectionChecked: the reader refuses a residency section that is malformed or disagrees with
// the entries (each case patched into the "resident" seed and resealed), and a pack before version 3 whose
// index header uses the bytes version 3 gave the section length.
func TestResidencySectionChecked(t *testing.T) {
	seeds := fuzzSeeds(t)
	base := expandZeros(seeds["resident"])
	io := int(le.Uint64(base[24:]))
	il := int(le.Uint64(base[32:]))
	rl := int(le.Uint32(base[io+56:]))
	sec := io + il - rl // the section's first byte
	if rl == 0 || string(base[sec:sec+4]) != "OKRS" {
		t.Fatalf("seed resident: section of %d bytes at %d", rl, sec)
	}
	first := sec + residencyHeaderSize // the first expert record
	// The three records: hot (layer 0, expert 0; 7 lookups), then cold (0, 1; 3) and (1, 0; 0), two
	// entries, two entries and one: their lookups at these offsets.
	lookups := []int{first + 8, first + 28 + 8, first + 56 + 8}
	for _, c := range []struct {
		name  string
		patch func(b []byte)
		want  string
	}{
		{"magic", func(b []byte) { b[sec] = 'X' }, "magic"},
		{"reserved", func(b []byte) { b[sec+60] = 1 }, "reserved bytes 56..63"},
		{"length", func(b []byte) { le.PutUint32(b[io+56:], uint32(il)) }, "does not fit"},
		{"header reserved", func(b []byte) { b[io+61] = 1 }, "reserved header fields"},
		{"budget", func(b []byte) { le.PutUint64(b[sec+16:], 4096) }, "more than the budget 4096"},
		{"position", func(b []byte) { le.PutUint32(b[first+20:], 99) }, "entry position 99"},
		{"entries count", func(b []byte) { le.PutUint32(b[first+16:], 0) }, "0 entries"},
		{"expert count", func(b []byte) { le.PutUint32(b[sec+4:], 2) }, "bytes after the last expert record"},
		{"hot", func(b []byte) { le.PutUint32(b[sec+8:], 5) }, "5 hot of 3 experts"},
		// crafted/hitrate.orkpack: lookups that wrap int64 made a hit rate of 0.73 out of ~0.
		{"lookups sum", func(b []byte) { le.PutUint64(b[lookups[0]:], 1<<62); le.PutUint64(b[lookups[1]:], 1<<62) },
			"expert 1 of layer 0: its 4611686018427387904 lookups take the experts' sum past 9223372036854775807"},
		{"stream order", func(b []byte) { le.PutUint64(b[lookups[2]:], 4) },
			"expert 0 of layer 1 (4 lookups) after expert 1 of layer 0 (3 lookups): the cold experts are not in plan order"},
		{"hot order", func(b []byte) { le.PutUint32(b[sec+8:], 2); le.PutUint64(b[lookups[0]:], 2) },
			"expert 1 of layer 0 (3 lookups) after expert 0 of layer 0 (2 lookups): the hot experts are not in plan order"},
		{"tie order", func(b []byte) { le.PutUint64(b[lookups[1]:], 0) }, ""}, // (0, 1) before (1, 0): by layer
	} {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte(nil), base...)
			c.patch(b)
			s, ok := reseal(b)
			if !ok {
				t.Fatal("reseal failed")
			}
			_, err := NewReader(context.Background(), bytesReaderAt(s), int64(len(s)), "patched.orkpack")
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrIndex with %q", err, c.want)
			}
		})
	}
	v2 := expandZeros(seeds["v2-one"])
	io2 := int(le.Uint64(v2[24:]))
	le.PutUint32(v2[io2+56:], 64)
	s, _ := reseal(v2)
	if _, err := NewReader(context.Background(), bytesReaderAt(s), int64(len(s)), "v2.orkpack"); !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), "reserved header fields") {
		t.Fatalf("version 2 with a section length: %v", err)
	}
}
