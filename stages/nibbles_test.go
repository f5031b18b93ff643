package stages

import (
	"slices"
	"testing"
)

// TestPackNibbles: eight codes a step and the scalar tail agree with the format's definition for
// every length up to 41 (all sixteen values), unpack inverts pack, and a code outside -8..7 at any
// position (each of the values around the range) is reported.
func TestPackNibbles(t *testing.T) {
	for n := range 42 {
		codes := make([]int8, n)
		for i := range codes {
			codes[i] = int8((i*11+n)%16 - 8)
		}
		dst := make([]byte, (n+1)/2)
		if !packNibbles(dst, codes) {
			t.Fatalf("n=%d: codes within -8..7 reported outside", n)
		}
		for i, c := range codes {
			if got := int8(dst[i/2]>>(4*(i%2))<<4) >> 4; got != c {
				t.Fatalf("n=%d: code %d packed as %d, want %d", n, i, got, c)
			}
		}
		if n%2 == 1 && dst[n/2]>>4 != 0 {
			t.Fatalf("n=%d: padding nibble %x", n, dst[n/2]>>4)
		}
		back := make([]int8, n)
		unpackNibbles(int8Bytes(back), dst)
		if !slices.Equal(back, codes) {
			t.Fatalf("n=%d: unpacked %v, want %v", n, back, codes)
		}
		for i := range codes {
			for _, v := range []int8{8, 9, 16, 64, 127, -9, -16, -128} {
				bad := slices.Clone(codes)
				bad[i] = v
				if packNibbles(dst, bad) {
					t.Fatalf("n=%d: code %d at %d not reported", n, v, i)
				}
			}
		}
	}
}
