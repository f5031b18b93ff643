package tile

import (
	"math/rand/v2"
	"testing"
)

// The 27B ffn_up/ffn_gate shape: K=5120, N=17408. Throughput is reported per code (MB/s of int8 codes in).
const benchK, benchN = 5120, 17408

func benchTile(b *testing.B, kind Kind) {
	l, err := New(kind, benchK, benchN)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 1))
	codes := randCodes(r, benchK, benchN, kind)
	dst := make([]byte, l.Size())
	b.SetBytes(int64(len(codes)))
	b.ResetTimer()
	for b.Loop() {
		if err := l.Tile(dst, codes); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyBaseline copies the same number of code bytes: the ratio of a tiling benchmark to this one
// is the cost of the layout over a plain memory copy, measured in the same run.
func BenchmarkCopyBaseline(b *testing.B) {
	src := make([]byte, benchK*benchN)
	dst := make([]byte, benchK*benchN)
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		copy(dst, src)
	}
}

func BenchmarkTileInt8(b *testing.B)        { benchTile(b, I8Native) }
func BenchmarkTileInt4(b *testing.B)        { benchTile(b, I4Native) }
func BenchmarkTileInt4Compact(b *testing.B) { benchTile(b, I4Compact) }

func BenchmarkUntileInt4(b *testing.B) {
	l, _ := New(I4Native, benchK, benchN)
	r := rand.New(rand.NewPCG(1, 1))
	codes := randCodes(r, benchK, benchN, I4Native)
	buf := make([]byte, l.Size())
	if err := l.Tile(buf, codes); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(codes)))
	b.ResetTimer()
	for b.Loop() {
		if err := l.Untile(codes, buf); err != nil {
			b.Fatal(err)
		}
	}
}
