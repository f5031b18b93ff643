package stages

import (
	"os"
	"path/filepath"
	"testing"

	"orkpipe/artifacts"
)

// BenchmarkQWeight writes and reads back the finalized weight of a Qwen3.6-27B ffn_down (5120 x
// 17408, int4, groups of 32): what finalize writes and tile and propagate read, per weight. The
// bytes per op are the codes' count.
func BenchmarkQWeight(b *testing.B) {
	const n, k = 5120, 17408
	m := QWeightMeta{Name: "blk.0.ffn_down.weight", DType: "I4_ROT_A8", Method: "gptq", N: n, K: k, KP: k, Bits: 4, Group: 32,
		ActBits: 8, Source: artifacts.SumBytes([]byte("x")).String()}
	q := &QWeight{Meta: m, Codes: make([]int8, n*k), Scales: make([]float32, n*m.Groups())}
	for i := range q.Codes {
		q.Codes[i] = int8(i*7%16 - 8)
	}
	dir := b.TempDir()
	b.Run("write", func(b *testing.B) {
		b.SetBytes(int64(len(q.Codes)))
		p := filepath.Join(dir, "w")
		for b.Loop() {
			if err := WriteQWeight(p, q); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := os.Remove(p); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	p := filepath.Join(dir, "r")
	if err := WriteQWeight(p, q); err != nil {
		b.Fatal(err)
	}
	b.Run("read", func(b *testing.B) {
		b.SetBytes(int64(len(q.Codes)))
		for b.Loop() {
			if _, err := ReadQWeight(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
