package pack_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

func smallPack(t testing.TB) []byte {
	r := rand.New(rand.NewPCG(60, 61))
	ws := []pack.Weight{
		quantized(r, "blk.0.attn_q.weight", pack.I4Native, 172, 100, 32, tile.LowFirst),
		quantized(r, "blk.0.ffn_down.weight", pack.I8, 64, 64, 0, tile.LowFirst),
		quantized(r, "blk.0.x.weight", pack.F16, 40, 20, 0, tile.LowFirst),
	}
	b, err := os.ReadFile(writePack(t, t.TempDir(), ws))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openAndVerify is everything a loader does before running: open (header, footer, index) and verify entries.
func openAndVerify(b []byte) error {
	ctx := context.Background()
	pr, err := pack.NewReader(ctx, bytes.NewReader(b), int64(len(b)), "test.orkpack")
	if err != nil {
		return err
	}
	return pr.VerifyAll(ctx)
}

func TestDetectTruncation(t *testing.T) {
	b := smallPack(t)
	if err := openAndVerify(b); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(62, 63))
	for i := 0; i < 20; i++ {
		cut := r.IntN(len(b))
		err := openAndVerify(b[:cut])
		if !errors.Is(err, pack.ErrTruncated) || !strings.Contains(err.Error(), "truncated") {
			t.Fatalf("truncated at %d of %d: err = %v, want ErrTruncated", cut, len(b), err)
		}
		if i < 3 {
			t.Logf("cut at %d: %v", cut, err)
		}
	}
}

func TestDetectAppendedGarbage(t *testing.T) {
	b := smallPack(t)
	for _, n := range []int{1, 104, 4096} {
		g := append(append([]byte(nil), b...), bytes.Repeat([]byte{0x5a}, n)...)
		if err := openAndVerify(g); !errors.Is(err, pack.ErrTrailing) {
			t.Fatalf("%d bytes appended: err = %v, want ErrTrailing", n, err)
		} else if n == 1 {
			t.Log(err)
		}
	}
}

// TestDetectFlips flips every byte of the pack, one at a time: header, entries, index and footer.
func TestDetectFlips(t *testing.T) {
	b := smallPack(t)
	pr, err := pack.NewReader(context.Background(), bytes.NewReader(b), int64(len(b)), "x")
	if err != nil {
		t.Fatal(err)
	}
	entries := pr.Entries()
	indexOff := entries[len(entries)-1].Offset + entries[len(entries)-1].Length
	footerOff := int64(len(b)) - pack.FooterSize
	r := rand.New(rand.NewPCG(64, 65))
	c := append([]byte(nil), b...)
	flip := func(pos int64, region string) {
		c[pos] ^= byte(1 + r.IntN(255))
		defer func() { c[pos] = b[pos] }()
		ctx := context.Background()
		pr, err := pack.NewReader(ctx, bytes.NewReader(c), int64(len(c)), "test.orkpack")
		if err == nil {
			if e, ok := entryAt(entries, pos); ok { // what a loader does when it loads that entry
				_, err = pr.Load(ctx, e.Name)
			} else {
				err = pr.VerifyAll(ctx)
			}
		}
		if err == nil || !strings.Contains(err.Error(), region) {
			t.Fatalf("byte %d flipped (%s): err = %v, want an error naming %q", pos, region, err, region)
		}
	}
	for pos := int64(0); pos < pack.HeaderSize; pos++ {
		flip(pos, "header")
	}
	for pos := indexOff; pos < footerOff; pos++ {
		flip(pos, "index")
	}
	for pos := footerOff; pos < int64(len(b)); pos++ {
		flip(pos, "footer")
	}
	for _, e := range entries { // every byte of every entry: codes, scales and padding
		for pos := e.Offset; pos < e.Offset+e.Length; pos++ {
			flip(pos, e.Name)
		}
	}
	c[entries[1].Offset+7] ^= 0x10
	t.Logf("entry flip: %v", openAndVerify(c))
}

func entryAt(es []pack.Entry, pos int64) (pack.Entry, bool) {
	for _, e := range es {
		if pos >= e.Offset && pos < e.Offset+e.Length {
			return e, true
		}
	}
	return pack.Entry{}, false
}

// TestVerifyEntriesWorkers: any number of workers verifies every entry and reports each damaged one,
// in index order, and nothing else; a clean pack passes; a canceled context stops it.
func TestVerifyEntriesWorkers(t *testing.T) {
	b := smallPack(t)
	ctx := context.Background()
	pr, err := pack.NewReader(ctx, bytes.NewReader(b), int64(len(b)), "x")
	if err != nil {
		t.Fatal(err)
	}
	entries := pr.Entries()
	c := append([]byte(nil), b...)
	c[entries[0].Offset+3] ^= 0x40
	c[entries[2].Offset+entries[2].Length-1] ^= 0x01 // scales padding
	bad, err := pack.NewReader(ctx, bytes.NewReader(c), int64(len(c)), "x")
	if err != nil {
		t.Fatal(err)
	}
	var longest int64
	for _, e := range entries {
		longest = max(longest, e.Length)
	}
	if m := pr.VerifyMemory(); m != min(longest, 1<<20) {
		t.Errorf("VerifyMemory %d, want the longest entry's %d bytes up to 1 MiB", m, longest)
	}
	for _, workers := range []int{0, 1, 2, 3, 8} {
		if err := pr.VerifyEntries(ctx, workers); err != nil {
			t.Errorf("%d workers, clean pack: %v", workers, err)
		}
		err := bad.VerifyEntries(ctx, workers)
		msg := fmt.Sprint(err)
		i0, i2 := strings.Index(msg, entries[0].Name), strings.Index(msg, entries[2].Name)
		if !errors.Is(err, pack.ErrCorrupt) || i0 < 0 || i2 < i0 || strings.Contains(msg, entries[1].Name) {
			t.Errorf("%d workers, entries 0 and 2 damaged: %v", workers, err)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := pr.VerifyEntries(canceled, 2); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}
