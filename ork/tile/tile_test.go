package tile

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func randCodes(r *rand.Rand, k, n int, kind Kind) []int8 {
	c := make([]int8, k*n)
	for i := range c {
		if kind == I8Native {
			c[i] = int8(r.IntN(256) - 128)
		} else {
			c[i] = int8(r.IntN(16) - 8)
		}
	}
	return c
}

func roundTrip(t *testing.T, r *rand.Rand, kind Kind, k, n int, opts ...Option) {
	t.Helper()
	l, err := New(kind, k, n, opts...)
	if err != nil {
		t.Fatalf("New(%s, %d, %d): %v", kind, k, n, err)
	}
	buf := make([]byte, l.Size())
	if kind == F16Native {
		vals := make([]uint16, k*n)
		for i := range vals {
			vals[i] = uint16(r.Uint32())
		}
		if err := l.TileF16(buf, vals); err != nil {
			t.Fatal(err)
		}
		back := make([]uint16, k*n)
		if err := l.UntileF16(back, buf); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(vals, back) {
			t.Fatalf("%s: fp16 round trip differs", l)
		}
		return
	}
	codes := randCodes(r, k, n, kind)
	if err := l.Tile(buf, codes); err != nil {
		t.Fatal(err)
	}
	back := make([]int8, k*n)
	if err := l.Untile(back, buf); err != nil {
		t.Fatalf("%s: %v", l, err)
	}
	if !slices.Equal(codes, back) {
		t.Fatalf("%s: round trip differs", l)
	}
	// Every code sits where Locate says, so the single-element view agrees with the walk.
	for i := 0; i < 64; i++ {
		nn, kk := r.IntN(n), r.IntN(k)
		off, sh := l.Locate(nn, kk)
		var got int8
		if kind == I8Native {
			got = int8(buf[off])
		} else {
			got = int8(buf[off]>>sh<<4) >> 4
		}
		if got != codes[nn*k+kk] {
			t.Fatalf("%s: Locate(%d,%d) holds %d, want %d", l, nn, kk, got, codes[nn*k+kk])
		}
	}
}

func TestRoundTripShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := []struct{ k, n int }{
		{64, 64}, {172, 64}, {172, 100}, {64, 6144}, {5120, 96}, {17408, 70}, {8192, 33}, {8224, 17}, {1, 1}, {33, 65},
	}
	for _, kind := range []Kind{I8Native, I4Native, F16Native, I4Compact} {
		for _, s := range shapes {
			for _, nib := range []NibbleOrder{LowFirst, HighFirst} {
				t.Run(fmt.Sprintf("%s/K%d/N%d/%s", kind, s.k, s.n, nib), func(t *testing.T) {
					roundTrip(t, r, kind, s.k, s.n, WithNibbleOrder(nib))
				})
			}
		}
	}
}

func TestRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	kinds := []Kind{I8Native, I4Native, F16Native, I4Compact}
	for i := 0; i < 300; i++ {
		kind := kinds[r.IntN(len(kinds))]
		k, n := 1+r.IntN(400), 1+r.IntN(200)
		sk := 32 * (1 + r.IntN(6))
		page := 64 << r.IntN(4)
		roundTrip(t, r, kind, k, n, WithSegmentK(sk), WithPageSize(page), WithNibbleOrder(NibbleOrder(r.IntN(2))))
	}
}

func TestGeometry(t *testing.T) {
	tests := []struct {
		kind               Kind
		k, n               int
		kp, np, segs, size int
	}{
		{I8Native, 32, 32, 32, 32, 1, 4096},
		{I4Native, 64, 64, 64, 64, 1, 4096},
		{I4Native, 172, 100, 192, 128, 1, 12288},                      // 128*192/2 = 12288, already page aligned
		{I4Native, 17408, 5120, 17408, 5120, 3, 2*20971520 + 2621440}, // 8192,8192,1024 segments
		{I8Native, 5120, 6144, 5120, 6144, 1, 31457280},
		{F16Native, 40, 20, 64, 32, 1, 4096},
		{I4Compact, 172, 100, 192, 100, 1, 12288}, // 100*192/2 = 9600 -> 12288
	}
	for _, tc := range tests {
		l, err := New(tc.kind, tc.k, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if l.Kp() != tc.kp || l.Np() != tc.np || l.Segments() != tc.segs || l.Size() != tc.size {
			t.Errorf("%s: got Kp=%d Np=%d segs=%d size=%d, want %d %d %d %d", l, l.Kp(), l.Np(), l.Segments(), l.Size(), tc.kp, tc.np, tc.segs, tc.size)
		}
	}
}

// golden codes: c(n,k) = (7n + 3k) mod 16 - 8 for int4.
func goldenI4(n, k int) int8 { return int8((7*n+3*k)%16 - 8) }

// TestGoldenInt4 checks bytes computed by hand from docs/orkpack.md 2.2 for a 64x64 int4 native weight.
func TestGoldenInt4(t *testing.T) {
	codes := make([]int8, 64*64)
	for n := 0; n < 64; n++ {
		for k := 0; k < 64; k++ {
			codes[n*64+k] = goldenI4(n, k)
		}
	}
	// By hand: element e = ((n/64)*(64/32) + k/32)*2048 + (n%64)*32 + k%32, byte e/2.
	// byte 17  = e 34,35 = (n1,k2)=5 -> 0x5, (n1,k3)=-8 -> 0x8
	// byte 1024 = e 2048,2049 = (n0,k32)=-8 -> 0x8, (n0,k33)=-5 -> 0xb
	// byte 2047 = e 4094,4095 = (n63,k62)=-5 -> 0xb, (n63,k63)=-2 -> 0xe
	// byte 0   = e 0,1 = (n0,k0)=-8 -> 0x8, (n0,k1)=-5 -> 0xb
	// byte 48  = e 96,97 = (n3,k0)=21%16-8=-3 -> 0xd, (n3,k1)=24%16-8=0 -> 0x0
	tests := []struct {
		nib  NibbleOrder
		off  int
		want byte
	}{
		{LowFirst, 17, 0x85}, {LowFirst, 1024, 0xb8}, {LowFirst, 2047, 0xeb}, {LowFirst, 0, 0xb8}, {LowFirst, 48, 0x0d},
		{HighFirst, 17, 0x58}, {HighFirst, 1024, 0x8b}, {HighFirst, 2047, 0xbe}, {HighFirst, 0, 0x8b}, {HighFirst, 48, 0xd0},
		{LowFirst, 2048, 0x00}, {LowFirst, 4095, 0x00}, // page padding
	}
	for _, nib := range []NibbleOrder{LowFirst, HighFirst} {
		l, err := New(I4Native, 64, 64, WithNibbleOrder(nib))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, l.Size())
		if err := l.Tile(buf, codes); err != nil {
			t.Fatal(err)
		}
		if len(buf) != 4096 {
			t.Fatalf("size %d, want 4096", len(buf))
		}
		for _, tc := range tests {
			if tc.nib == nib && buf[tc.off] != tc.want {
				t.Errorf("%s byte %d = %#02x, want %#02x", nib, tc.off, buf[tc.off], tc.want)
			}
		}
	}
}

// TestGoldenInt8 checks hand-computed positions for a 32x32 and a 64x64 int8 native weight.
func TestGoldenInt8(t *testing.T) {
	c := func(n, k int) int8 { return int8((31*n+5*k)%256 - 128) }
	for _, dim := range []int{32, 64} {
		codes := make([]int8, dim*dim)
		for n := 0; n < dim; n++ {
			for k := 0; k < dim; k++ {
				codes[n*dim+k] = c(n, k)
			}
		}
		l, err := New(I8Native, dim, dim)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, l.Size())
		if err := l.Tile(buf, codes); err != nil {
			t.Fatal(err)
		}
		// By hand: e = ((n/32)*(K/32) + k/32)*1024 + (n%32)*32 + k%32.
		pos := map[int][2]int{ // byte -> (n, k)
			0:    {0, 0},
			33:   {1, 1},
			1023: {31, 31},
			1000: {31, 8},
		}
		if dim == 64 {
			pos = map[int][2]int{
				1024: {0, 32},  // tile (0,1)
				2048: {32, 0},  // tile (1,0)
				3112: {33, 40}, // tile (1,1): 3072 + 1*32 + 8
				4095: {63, 63}, // tile (1,1): 3072 + 31*32 + 31
				1055: {0, 63},  // tile (0,1): 1024 + 0*32 + 31
			}
		}
		for off, nk := range pos {
			if got, want := int8(buf[off]), c(nk[0], nk[1]); got != want {
				t.Errorf("%dx%d byte %d = %d, want c(%d,%d) = %d", dim, dim, off, got, nk[0], nk[1], want)
			}
		}
	}
}

func TestUntileDetectsBadPadding(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, kind := range []Kind{I8Native, I4Native, I4Compact} {
		l, err := New(kind, 40, 40)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, l.Size())
		codes := randCodes(r, 40, 40, kind)
		if err := l.Tile(buf, codes); err != nil {
			t.Fatal(err)
		}
		for _, where := range []struct{ n, k int }{{0, 45}, {39, 63}} {
			b := slices.Clone(buf)
			off, sh := l.Locate(where.n, where.k)
			b[off] |= 1 << sh
			if err := l.Untile(make([]int8, 1600), b); !errors.Is(err, ErrPadding) {
				t.Errorf("%s: padding (%d,%d) set: err = %v, want ErrPadding", kind, where.n, where.k, err)
			}
		}
		b := slices.Clone(buf)
		b[len(b)-1] = 1
		if err := l.Untile(make([]int8, 1600), b); !errors.Is(err, ErrPadding) {
			t.Errorf("%s: page padding set: err = %v, want ErrPadding", kind, err)
		}
	}
}

func TestErrors(t *testing.T) {
	if _, err := New(I8Native, 0, 5); !errors.Is(err, ErrShape) {
		t.Errorf("K=0: %v", err)
	}
	if _, err := New(I8Native, 5, 5, WithSegmentK(100)); !errors.Is(err, ErrOption) {
		t.Errorf("segK=100: %v", err)
	}
	if _, err := New(I8Native, 5, 5, WithPageSize(1000)); !errors.Is(err, ErrOption) {
		t.Errorf("page=1000: %v", err)
	}
	l, _ := New(I4Native, 32, 64)
	codes := make([]int8, 32*64)
	codes[100] = 8
	if err := l.Tile(make([]byte, l.Size()), codes); !errors.Is(err, ErrRange) {
		t.Errorf("code 8 in int4: %v", err)
	}
	if err := l.Tile(make([]byte, 10), make([]int8, 32*64)); !errors.Is(err, ErrSize) {
		t.Errorf("short dst: %v", err)
	}
	if err := l.TileF16(make([]byte, l.Size()), make([]uint16, 32*64)); !errors.Is(err, ErrWrongKind) {
		t.Errorf("TileF16 on int4: %v", err)
	}
}

func TestInflate(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, from := range []Kind{I4Compact, I4Native} {
		src, _ := New(from, 172, 100)
		dst, _ := New(I8Native, 172, 100)
		codes := randCodes(r, 172, 100, I4Native)
		a := make([]byte, src.Size())
		if err := src.Tile(a, codes); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, dst.Size())
		if err := Inflate(b, dst, a, src); err != nil {
			t.Fatal(err)
		}
		back := make([]int8, len(codes))
		if err := dst.Untile(back, b); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(back, codes) {
			t.Fatalf("inflate from %s changed codes", from)
		}
	}
}

// TestWalkMatchesLocate: every run the walk yields starts where Locate (runOffset) puts its first code, and
// the runs tile the codes region exactly once.
func TestWalkMatchesLocate(t *testing.T) {
	for _, kind := range []Kind{I8Native, I4Native, F16Native, I4Compact} {
		for _, s := range []struct{ k, n, sk int }{{64, 64, 8192}, {172, 100, 64}, {8224, 70, 8192}, {100, 33, 32}} {
			l, err := New(kind, s.k, s.n, WithSegmentK(s.sk))
			if err != nil {
				t.Fatal(err)
			}
			seen := make([]bool, l.Size())
			runBytes := runLen * l.elemBits() / 8
			l.walk(func(n, k0, off int) {
				if want := l.runOffset(n, k0); off != want {
					t.Fatalf("%s: walk puts run (%d,%d) at %d, runOffset says %d", l, n, k0, off, want)
				}
				if got, _ := l.Locate(n, k0); got != off {
					t.Fatalf("%s: Locate(%d,%d) = %d, walk %d", l, n, k0, got, off)
				}
				for i := off; i < off+runBytes; i++ {
					if seen[i] {
						t.Fatalf("%s: byte %d written by two runs", l, i)
					}
					seen[i] = true
				}
			})
			for s := 0; s < l.Segments(); s++ {
				for i := l.SegmentOffset(s); i < l.SegmentOffset(s)+l.SegmentBytes(s); i++ {
					if !seen[i] {
						t.Fatalf("%s: byte %d of segment %d not covered by any run", l, i, s)
					}
				}
			}
		}
	}
}

// TestCheckPaddingAgreesWithUntile: for random corruptions, CheckPadding fails exactly when Untile fails.
func TestCheckPaddingAgreesWithUntile(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, kind := range []Kind{I8Native, I4Native, F16Native, I4Compact} {
		l, _ := New(kind, 50, 37, WithSegmentK(32), WithPageSize(64))
		buf := make([]byte, l.Size())
		if kind == F16Native {
			vals := make([]uint16, 50*37)
			for i := range vals {
				vals[i] = uint16(r.Uint32())
			}
			l.TileF16(buf, vals)
		} else {
			l.Tile(buf, randCodes(r, 50, 37, kind))
		}
		for i := 0; i < 2000; i++ {
			c := slices.Clone(buf)
			c[r.IntN(len(c))] ^= byte(1 << r.IntN(8))
			var uerr error
			if kind == F16Native {
				uerr = l.UntileF16(make([]uint16, 50*37), c)
			} else {
				uerr = l.Untile(make([]int8, 50*37), c)
			}
			if cerr := l.CheckPadding(c); (cerr == nil) != (uerr == nil) {
				t.Fatalf("%s: CheckPadding %v, Untile %v", kind, cerr, uerr)
			}
		}
	}
}

// TestTileOverwritesGarbage: Tile writes every byte of dst (padding included), so a reused buffer full of
// garbage gives the same bytes as a fresh one.
func TestTileOverwritesGarbage(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, kind := range []Kind{I8Native, I4Native, F16Native, I4Compact} {
		l, _ := New(kind, 70, 45, WithSegmentK(32), WithPageSize(64))
		fresh, dirty := make([]byte, l.Size()), make([]byte, l.Size())
		for i := range dirty {
			dirty[i] = byte(r.Uint32())
		}
		if kind == F16Native {
			vals := make([]uint16, 70*45)
			for i := range vals {
				vals[i] = uint16(r.Uint32())
			}
			l.TileF16(fresh, vals)
			l.TileF16(dirty, vals)
		} else {
			codes := randCodes(r, 70, 45, kind)
			l.Tile(fresh, codes)
			l.Tile(dirty, codes)
		}
		if !slices.Equal(fresh, dirty) {
			t.Fatalf("%s: Tile left stale bytes in a reused buffer", kind)
		}
	}
}
