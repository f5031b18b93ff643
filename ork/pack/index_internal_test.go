package pack

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"orkpipe/internal/blake3x"
)

// sealPack assembles a pack from an index whose entries' data is the page-aligned run from the first
// page to indexOffset (data holds its bytes; zero when shorter): header, data, index, footer.
func sealPack(index []byte, count int, indexOffset int64, data []byte) []byte {
	t := trailer{version: Version, indexOffset: indexOffset, indexLength: int64(len(index)), indexDigest: blake3x.Sum256(index), count: uint32(count)}
	t.total = t.indexOffset + t.indexLength + FooterSize
	b := make([]byte, t.total)
	copy(b, encodeHeader(t))
	copy(b[HeaderSize:], data)
	copy(b[indexOffset:], index)
	copy(b[t.total-FooterSize:], encodeFooter(t))
	return b
}

// f16Entry is an F16 entry of k x n at offset (its data not written).
func f16Entry(t *testing.T, name string, k, n int, offset int64) Entry {
	t.Helper()
	e, err := Geometry(Meta{Name: name, DType: F16, K: k, N: n, Source: Digest{1}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.Offset = offset
	return e
}

// TestEntryExtentsChecked: Open refuses an entry that runs past the index offset, however its length
// wraps the running offset. 2^15 F16 entries of 2^24 x 2^24 (2^49 bytes each) sum to 2^64: the running
// offset used to wrap back to the first page, so the contiguity check passed and verify allocated 2^49
// bytes (crafted/wrap.orkpack); one of them past a short data region, and a resident byte sum that would
// wrap int64, are refused the same way.
func TestEntryExtentsChecked(t *testing.T) {
	big := f16Entry(t, "w0", 1<<24, 1<<24, HeaderSize)
	if big.Length != 1<<49 {
		t.Fatalf("F16 2^24 x 2^24 is %d bytes, want 2^49", big.Length)
	}
	board := Board{Name: "rk3588", Domains: 1}
	wrap := make([]Entry, 1<<15)
	for i := range wrap {
		wrap[i] = big
		wrap[i].Name = "w" + strconv.Itoa(i)
		wrap[i].Offset = HeaderSize + int64(i)*big.Length // wraps to HeaderSize after the last
	}
	small := f16Entry(t, "s", 32, 16, HeaderSize) // one page
	resident := []Entry{small, small}
	resident[1].Name, resident[1].Offset = "t", 2*HeaderSize
	resident[0].ResidentBytes, resident[1].ResidentBytes = 1<<62, 1<<62 // 2^63: past int64
	for _, c := range []struct {
		name        string
		board       Board
		entries     []Entry
		indexOffset int64
		want        string
	}{
		{"wrap", board, wrap, HeaderSize, `entry "w0" at offset 4096, 562949953421312 bytes long, ends at 562949953425408, past the index offset 4096`},
		{"past", board, []Entry{big}, 2 * HeaderSize, "ends at 562949953425408, past the index offset 8192"},
		{"resident", board, resident, 3 * HeaderSize, `entry "t": resident bytes 4611686018427387904 take the entries' sum (4611686018427387904 before it) past 9223372036854775807`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := sealPack(encodeIndex(c.board, c.entries, nil), len(c.entries), c.indexOffset, nil)
			_, err := NewReader(context.Background(), bytesReaderAt(b), int64(len(b)), c.name+".orkpack")
			if !errors.Is(err, ErrIndex) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.name+".orkpack") {
				t.Fatalf("err = %v, want ErrIndex naming the file and %q", err, c.want)
			}
		})
	}
}
