package pack

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/tile"
)

// TestCheckDataRejectsWhatDecodeRejects: VerifyEntries checks an entry without untiling it (dataCheck),
// a page at a time; for every single-byte change of an entry's data (codes, code padding, page padding,
// scales, scales padding), in one or several segments, it must reject exactly the data that decoding
// (decodeInto, what Load runs) rejects, whether it checks the data whole or page by page.
func TestCheckDataRejectsWhatDecodeRejects(t *testing.T) {
	if raceEnabled {
		testfiles.SkipBuild(t, "-race: every byte flip of small entries, on one goroutine (layouts under 1 MiB tile serially); the plain run checks them")
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		dt                DType
		k, n, group, segK int
	}{
		{I4Native, 40, 3, 32, 0}, {I4, 72, 5, 0, 0}, {I4RotA8, 64, 33, 32, 0}, {I8, 33, 2, 0, 0}, {F16, 17, 3, 0, 0},
		{I8, 72, 5, 0, 32}, {I4Native, 100, 65, 32, 64}, {F16, 40, 17, 0, 32}, {I4, 70, 3, 64, 32},
	} {
		t.Run(fmt.Sprintf("%s_%dx%d_sk%d", c.dt, c.k, c.n, c.segK), func(t *testing.T) {
			m := Meta{Name: "w", DType: c.dt, K: c.k, N: c.n, Group: c.group, Source: Digest{1}}
			if c.dt.Int4() {
				m.Nibbles = tile.HighFirst
			}
			if c.dt.RotationRequired() {
				m.Rotation = Rotation{Kind: RotHadamard, Block: 64, Seed: 1}
			}
			w := Weight{Meta: m}
			if c.dt == F16 {
				w.F16 = make([]uint16, c.k*c.n)
				for i := range w.F16 {
					w.F16[i] = uint16(r.Uint32())
				}
			} else {
				w.Codes = make([]int8, c.k*c.n)
				for i := range w.Codes {
					w.Codes[i] = int8(r.IntN(15) - 7)
				}
				w.Scales = make([]float32, c.n*m.Groups())
				for i := range w.Scales {
					w.Scales[i] = r.Float32() + 1e-3
				}
			}
			e, codes, err := tileInto(nil, w, c.segK)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := scaleBytes(e, w.Scales)
			if err != nil {
				t.Fatal(err)
			}
			data := append(append([]byte(nil), codes...), sb...)
			if int64(len(data)) != e.Length {
				t.Fatalf("data %d bytes, entry length %d", len(data), e.Length)
			}
			dec := Weight{Meta: e.Meta, Codes: make([]int8, len(w.Codes)), F16: make([]uint16, len(w.F16)), Scales: make([]float32, e.ScalesLength/4)}
			if err := checkData(e, data); err != nil {
				t.Fatalf("clean entry: %v", err)
			}
			rejected := 0
			step := 1
			if testing.Short() { // the board suite, under qemu-aarch64 (67 s for every byte): every 7th byte, coprime to a scale's 4 and a page
				step = 7
			}
			for i := 0; i < len(data); i += step {
				for _, x := range []byte{0x01, 0x10, 0x80} {
					data[i] ^= x
					derr, cerr, perr := decodeInto(e, data, &dec), checkData(e, data), checkPages(e, data)
					if (derr == nil) != (cerr == nil) || (derr == nil) != (perr == nil) {
						t.Fatalf("byte %d ^ %#02x: decode says %v, check says %v, page by page %v", i, x, derr, cerr, perr)
					}
					if cerr != nil {
						rejected++
					}
					data[i] ^= x
				}
			}
			if rejected == 0 {
				t.Fatal("no single-byte change was rejected: the test exercises nothing")
			}
			if err := checkData(e, data[:len(data)-1]); err == nil {
				t.Error("a short entry passed")
			}
		})
	}
}

// checkPages is checkData a page at a time, last page first.
func checkPages(e Entry, data []byte) error {
	c, err := newDataCheck(e)
	if err != nil {
		return err
	}
	for off := len(data) - PageSize; off >= 0; off -= PageSize {
		if err := c.check(int64(off), data[off:off+PageSize]); err != nil {
			return err
		}
	}
	return nil
}
