package tile

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestTileRowsMatchesTile: rows tiled in chunks of any size, concurrently, into a buffer full of
// garbage, plus ClearPadding, give Tile's bytes for every int kind, nibble order, ragged K and N,
// and several segments.
func TestTileRowsMatchesTile(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		kind Kind
		k, n int
		opts []Option
	}{
		{I4Native, 64, 64, nil},
		{I4Native, 100, 70, nil},
		{I4Native, 200, 130, []Option{WithSegmentK(64)}},
		{I4Native, 96, 65, []Option{WithNibbleOrder(HighFirst)}},
		{I4Native, 33, 1, []Option{WithPageSize(64)}},
		{I4Compact, 100, 7, nil},
		{I4Compact, 64, 9, []Option{WithNibbleOrder(HighFirst)}},
		{I8Native, 70, 33, nil},
		{I8Native, 160, 40, []Option{WithSegmentK(96)}},
	} {
		l, err := New(tc.kind, tc.k, tc.n, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(l.String(), func(t *testing.T) {
			codes := randCodes(r, tc.k, tc.n, tc.kind)
			want := make([]byte, l.Size())
			if err := l.Tile(want, codes); err != nil {
				t.Fatal(err)
			}
			for _, chunk := range []int{1, 3, tc.n} {
				got := make([]byte, l.Size())
				for i := range got {
					got[i] = byte(r.Uint32())
				}
				if err := l.ClearPadding(got); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				errs := make(chan error, tc.n)
				for first := 0; first < tc.n; first += chunk {
					wg.Add(1)
					go func() {
						defer wg.Done()
						end := min(first+chunk, tc.n)
						errs <- l.TileRows(got, first, codes[first*tc.k:end*tc.k])
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Fatal(err)
					}
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("chunks of %d rows: bytes differ from Tile's", chunk)
				}
			}
		})
	}
}

// TestTileRowsRejects: an int4 code outside [-8, 7] (named with its row and column), rows past N,
// a ragged row and a wrong buffer size are errors; TileF16's kind is refused.
func TestTileRowsRejects(t *testing.T) {
	l, err := New(I4Native, 40, 10)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, l.Size())
	codes := make([]int8, 2*40)
	codes[40+35] = 8
	if err := l.TileRows(dst, 3, codes); !errors.Is(err, ErrRange) || err.Error() != fmt.Sprintf("%v: int4 code 8 at n=4 k=35: want [-8, 7]", ErrRange) {
		t.Fatalf("out-of-range code: %v", err)
	}
	codes[40+35] = 0
	for _, tc := range []struct {
		name  string
		dst   []byte
		first int
		codes []int8
	}{
		{"past N", dst, 9, codes},
		{"ragged row", dst, 0, codes[:50]},
		{"negative first", dst, -1, codes},
		{"short buffer", dst[:len(dst)-1], 0, codes},
	} {
		if err := l.TileRows(tc.dst, tc.first, tc.codes); !errors.Is(err, ErrSize) {
			t.Errorf("%s: %v, want ErrSize", tc.name, err)
		}
	}
	if err := l.ClearPadding(dst[1:]); !errors.Is(err, ErrSize) {
		t.Errorf("ClearPadding of a short buffer: %v", err)
	}
	f, err := New(F16Native, 32, 16)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.TileRows(make([]byte, f.Size()), 0, make([]int8, 32)); !errors.Is(err, ErrWrongKind) {
		t.Errorf("TileRows on fp16: %v", err)
	}
}
