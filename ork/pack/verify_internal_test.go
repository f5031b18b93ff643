package pack

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"orkpipe/internal/blake3x"
	"orkpipe/internal/testfiles"
)

// zeroData is a pack whose entries' data are all zero bytes, held without them: head is the header page,
// tail the index and footer, from the index offset on.
type zeroData struct {
	head, tail  []byte
	indexOffset int64
}

func (z zeroData) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		switch o := off + int64(n); {
		case o < HeaderSize:
			n += copy(p[n:], z.head[o:])
		case o < z.indexOffset:
			m := min(int64(len(p)-n), z.indexOffset-o)
			clear(p[n : n+int(m)])
			n += int(m)
		case o-z.indexOffset < int64(len(z.tail)):
			n += copy(p[n:], z.tail[o-z.indexOffset:])
		default:
			return n, errors.New("EOF")
		}
	}
	return n, nil
}

// TestVerifyStreams: verification holds at most VerifyMemory (1 MiB) of an entry per worker, whatever the
// entry's size: a 256 MiB F16 entry of zero codes (a sparse file's hole, as crafted/sparse64g.orkpack
// holds 64 GiB) verifies while the reader allocates far less than the entry, and the same entry with its
// digest changed fails on the digest.
func TestVerifyStreams(t *testing.T) {
	if raceEnabled {
		testfiles.SkipBuild(t, "-race: hashing 512 MiB is slow; the plain run checks it")
	}
	if testing.Short() {
		testfiles.SkipShort(t, "-short: hashing 512 MiB (12 s in the board suite under qemu-aarch64; the same Go on both machines)")
	}
	e := f16Entry(t, "blk.0.big.weight", 8192, 16384, HeaderSize)
	h := blake3x.New()
	zeros := make([]byte, 1<<20)
	for n := int64(0); n < e.Length; n += int64(len(zeros)) {
		h.Write(zeros)
	}
	e.Digest = h.Sum256()
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		digest Digest
		want   string
	}{{"intact", e.Digest, ""}, {"changed", Digest{1}, "data at 4096+268435456 hashes to " + e.Digest.String()}} {
		t.Run(c.name, func(t *testing.T) {
			e := e
			e.Digest = c.digest
			index := encodeIndex(Board{Name: "rk3588", Domains: 1}, []Entry{e}, nil)
			b := sealPack(index, 1, HeaderSize+e.Length, nil)
			z := zeroData{head: b[:HeaderSize], tail: b[HeaderSize+e.Length:], indexOffset: HeaderSize + e.Length}
			r, err := NewReader(ctx, z, int64(len(b)), "sparse.orkpack")
			if err != nil {
				t.Fatal(err)
			}
			if m := r.VerifyMemory(); m != 1<<20 {
				t.Errorf("VerifyMemory %d, want 1 MiB", m)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err = r.VerifyEntries(ctx, 2)
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
				t.Errorf("verifying a %d-byte entry allocated %d bytes", e.Length, got)
			}
			if c.want == "" && err != nil || c.want != "" && (!errors.Is(err, ErrCorrupt) || !strings.Contains(fmt.Sprint(err), c.want)) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if err := r.VerifyEntry(ctx, e.Name); (err == nil) != (c.want == "") {
				t.Fatalf("VerifyEntry: %v", err)
			}
		})
	}
}
