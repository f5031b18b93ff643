package tile

import (
	"math/rand/v2"
	"testing"
	"time"
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

// BenchmarkTileVsCopy interleaves, in every iteration, a plain copy of the K*N code bytes, the tiling of
// the same codes (parallel, as Tile runs) and the same tiling on one goroutine, and reports the throughputs,
// tile/copy and the parallel speedup. Interleaving keeps the ratio meaningful on a
// machine whose load changes during the run.
func BenchmarkTileVsCopy(b *testing.B) {
	for _, kind := range []Kind{I8Native, I4Native} {
		b.Run(kind.String(), func(b *testing.B) {
			l, err := New(kind, benchK, benchN)
			if err != nil {
				b.Fatal(err)
			}
			codes := randCodes(rand.New(rand.NewPCG(1, 1)), benchK, benchN, kind)
			src := make([]byte, len(codes))
			cp := make([]byte, len(codes))
			dst := make([]byte, l.Size())
			var tCopy, tTile, tSerial time.Duration
			n := 0
			for b.Loop() {
				t0 := time.Now()
				copy(cp, src)
				tCopy += time.Since(t0)
				// Alternate which tiling runs first: the first one after the copy is measurably slower.
				for j := range 2 {
					serial := (j+n)%2 == 0
					if serial {
						maxWorkers = 1
					}
					t1 := time.Now()
					err := l.Tile(dst, codes)
					d := time.Since(t1)
					maxWorkers = 0
					if err != nil {
						b.Fatal(err)
					}
					if serial {
						tSerial += d
					} else {
						tTile += d
					}
				}
				n++
			}
			mb := float64(n) * float64(len(codes)) / 1e6
			b.ReportMetric(mb/tCopy.Seconds(), "copy-MB/s")
			b.ReportMetric(mb/tTile.Seconds(), "tile-MB/s")
			b.ReportMetric(mb/tSerial.Seconds(), "serial-MB/s")
			b.ReportMetric(tCopy.Seconds()/tTile.Seconds(), "tile/copy")
			b.ReportMetric(tSerial.Seconds()/tTile.Seconds(), "speedup")
		})
	}
}
