package registry

import (
	"bytes"
	"encoding/binary"
	"io"
	"runtime"
	"testing"
)

// TestRangeDecoderBounded is probe finding F2: a zstd frame header with Single_Segment and a
// 512 MiB Frame_Content_Size, on a 4 KiB blob, made the decoder allocate 512 MiB (out of memory
// with -j 8). A range's decoder refuses a frame claiming more than its known decoded length, and
// still decodes the frames push writes.
func TestRangeDecoderBounded(t *testing.T) {
	const want = 4000
	// Magic, FHD (FCS field 8 bytes, Single_Segment), FCS, then one last raw block of want bytes.
	frame := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0}
	frame = binary.LittleEndian.AppendUint64(frame, 512<<20)
	hdr := uint32(want)<<3 | 1
	frame = append(frame, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	frame = append(frame, bytes.Repeat([]byte{'x'}, want)...)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	dec, err := newRangeDecoder(bytes.NewReader(frame), want)
	if err == nil {
		_, err = io.Copy(io.Discard, io.LimitReader(dec, want+1))
		dec.Close()
	}
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Error("a frame claiming 512 MiB for a range of 4000 bytes decoded")
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
		t.Errorf("decoding allocated %d MiB", n>>20)
	}

	// Frames as push writes them, whole (small) and streamed (larger: an 8 MiB window), decode.
	for _, n := range []int{1, 1000, 1025, 4096, 100_000, 3 << 20, 9 << 20} {
		var buf bytes.Buffer
		enc, _ := newEncoder(&buf)
		src := bytes.Repeat([]byte("orkpipe range "), n/14+1)[:n]
		enc.Write(src)
		enc.Close()
		dec, err := newRangeDecoder(&buf, int64(n))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(dec)
		dec.Close()
		if err != nil || !bytes.Equal(got, src) {
			t.Errorf("%d bytes: decoded %d, %v", n, len(got), err)
		}
	}
}
