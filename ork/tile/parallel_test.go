package tile

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestParallelTileMatchesLocate tiles layouts big enough for the parallel walk (several segments,
// N not a multiple of the tile width) into a buffer full of garbage and compares every byte with a
// reference built code by code through Locate: each code where Locate puts it, everything else zero.
func TestParallelTileMatchesLocate(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	cases := []struct {
		kind Kind
		k, n int
	}{
		{I8Native, 17408, 200}, {I8Native, 5120, 1000}, {I4Native, 5120, 1000}, {I4Native, 17408, 333}, {I4Compact, 5000, 1401},
	}
	for _, c := range cases {
		for _, nib := range []NibbleOrder{LowFirst, HighFirst} {
			t.Run(fmt.Sprintf("%s/K%d/N%d/%s", c.kind, c.k, c.n, nib), func(t *testing.T) {
				l, err := New(c.kind, c.k, c.n, WithNibbleOrder(nib))
				if err != nil {
					t.Fatal(err)
				}
				if l.Size() < 2*parallelMinBytes {
					t.Fatalf("%s: %d bytes is too small to exercise the parallel walk", l, l.Size())
				}
				codes := randCodes(r, c.k, c.n, c.kind)
				want := make([]byte, l.Size())
				for n := 0; n < c.n; n++ {
					for k := 0; k < c.k; k++ {
						off, sh := l.Locate(n, k)
						if c.kind == I8Native {
							want[off] = byte(codes[n*c.k+k])
						} else {
							want[off] |= byte(codes[n*c.k+k]&0xf) << sh
						}
					}
				}
				got := bytes.Repeat([]byte{0xa5}, l.Size())
				if err := l.Tile(got, codes); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					i := 0
					for got[i] == want[i] {
						i++
					}
					t.Fatalf("%s: first difference at byte %d: %#02x, want %#02x", l, i, got[i], want[i])
				}
				if c.kind != I8Native {
					codes[len(codes)-3] = 9
					if err := l.Tile(got, codes); !errors.Is(err, ErrRange) {
						t.Fatalf("code 9 in the last rows: err %v, want ErrRange", err)
					}
				}
			})
		}
	}
}
