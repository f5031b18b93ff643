package pack

import (
	"context"
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/zeebo/blake3"
)

// TestMessagesNameTheStoredValue: a field out of range is reported as the unsigned value stored, naming
// that field alone, and the reader's errors speak of the pack (ErrIndex, ErrCorrupt), never of the
// writer's input (ErrInput, "bad entry input"). Each case patches a valid pack: the header or footer with
// its checksum recomputed, an index field resealed (the probe's crafted/hdr-totalmax, hdr-idxoff-neg,
// idx-offneg, idx-resneg and clip-nan packs).
func TestMessagesNameTheStoredValue(t *testing.T) {
	seeds := fuzzSeeds(t)
	clipped := expandZeros(seeds["clipped"])   // entry 0: "c.0", I4_NATIVE K=64 N=64 G=32
	resident := expandZeros(seeds["resident"]) // with a residency section
	header := func(off int, v uint64) func([]byte) []byte {
		return func(b []byte) []byte {
			le.PutUint64(b[off:], v)
			sum := blake3.Sum256(b[:headerFields])
			copy(b[80:112], sum[:])
			return b
		}
	}
	footer := func(off int, v uint64) func([]byte) []byte {
		return func(b []byte) []byte {
			f := b[len(b)-FooterSize:]
			le.PutUint64(f[off:], v)
			sum := blake3.Sum256(f[:64])
			copy(f[64:96], sum[:])
			return b
		}
	}
	index := func(at func(b []byte) int, v uint64) func([]byte) []byte {
		return func(b []byte) []byte {
			le.PutUint64(b[at(b):], v)
			s, ok := reseal(b)
			if !ok {
				t.Fatal("reseal failed")
			}
			return s
		}
	}
	record := func(field int) func(b []byte) int { return func(b []byte) int { return recordAt(b, 0) + field } }
	section := func(field int) func(b []byte) int {
		return func(b []byte) int {
			io, il := int(le.Uint64(b[24:])), int(le.Uint64(b[32:]))
			return io + il - int(le.Uint32(b[io+56:])) + field
		}
	}
	for _, c := range []struct {
		name  string
		pack  []byte
		patch func([]byte) []byte
		want  string
		not   string // a field the message must not name
	}{
		{"header total 2^64-1", clipped, header(16, math.MaxUint64), "header: corrupt: total length 18446744073709551615: want index offset 28672 + index length 613 + footer 104 = 29389", ""},
		{"header index offset 2^63", clipped, header(24, 1<<63), "header: corrupt: index offset 9223372036854775808: want a multiple of 4096 from 4096 to 9223372035781029888", ""},
		{"footer total 2^64-1", clipped, footer(48, math.MaxUint64), "footer: corrupt: total length 18446744073709551615: want index offset 28672", "corrupt: footer"},
		{"entry offset 2^63", clipped, index(record(48), 1<<63), `entry "c.0" at offset 9223372036854775808, want 4096`, ""},
		{"entry length 2^63", clipped, index(record(56), 1<<63), `entry "c.0" (I4_NATIVE K=64 N=64 G=32): stored geometry differs from the computed one: length 9223372036854775808 (computed 8192)`, "codes length"},
		{"resident bytes 2^63", clipped, index(record(88), 1<<63), `entry "c.0": resident bytes 9223372036854775808: want less than 2^63`, "domain"},
		{"total resident 2^63", clipped, index(func(b []byte) int { return int(le.Uint64(b[24:])) + 48 }, 1<<63), "total resident bytes 9223372036854775808: want less than 2^63", ""},
		{"budget 2^63", resident, index(section(16), 1<<63), "residency section: budget 9223372036854775808: want less than 2^63", "domains"},
		{"lookups 2^64-1", resident, index(section(residencyHeaderSize+8), math.MaxUint64), "expert record 0 (layer 0, expert 0): lookups 18446744073709551615: want less than 2^63", "twice"},
		{"clip NaN", clipped, index(record(96), 0x7fc00000<<32), `record 0: entry "c.0": activation clip NaN: want a ratio in (0, 1]`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.patch(append([]byte(nil), c.pack...))
			_, err := NewReader(context.Background(), bytesReaderAt(b), int64(len(b)), "patched.orkpack")
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			switch {
			case !strings.Contains(msg, c.want):
				t.Fatalf("err = %v, want %q", err, c.want)
			case c.not != "" && strings.Contains(msg, c.not):
				t.Errorf("err = %v names %q as well", err, c.not)
			case errors.Is(err, ErrInput) || strings.Contains(msg, ErrInput.Error()):
				t.Errorf("err = %v: the reader speaks of the writer's input", err)
			case regexp.MustCompile(` -[0-9]`).MatchString(msg):
				t.Errorf("err = %v: a negative number", err)
			}
		})
	}
}
