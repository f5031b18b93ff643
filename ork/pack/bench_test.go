package pack_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/ork/tile"
)

// The pack write benchmarks write 4 int4 entries of the 27B ffn_up shape (K=5120, N=17408: 42.5 MiB of tiled
// codes each). BenchmarkWritePlainFile writes the same number of bytes to a plain file with one fsync, in the
// same run: the ratio of the MB/s figures is the pack writer's overhead (tiling or verifying, hashing, index).
const benchEntries = 4

func benchWeight(b *testing.B) pack.Weight {
	r := rand.New(rand.NewPCG(80, 81))
	return quantized(r, "w", pack.I4Native, 5120, 17408, 128, tile.LowFirst)
}

func benchPackBytes(b *testing.B, wt pack.Weight) int64 {
	e, err := pack.Geometry(wt.Meta, 0)
	if err != nil {
		b.Fatal(err)
	}
	return benchEntries * e.Length
}

func BenchmarkWritePlainFile(b *testing.B) {
	wt := benchWeight(b)
	n := benchPackBytes(b, wt)
	buf := make([]byte, n/benchEntries)
	dir := b.TempDir()
	b.SetBytes(n)
	for i := 0; b.Loop(); i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprint("plain", i)))
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < benchEntries; j++ {
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		os.Remove(f.Name())
	}
}

// BenchmarkWritePack: Add (tile + hash + write) for each entry, then Commit (plan, index, fsync, re-open).
func BenchmarkWritePack(b *testing.B) {
	wt := benchWeight(b)
	b.SetBytes(benchPackBytes(b, wt))
	dir := b.TempDir()
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		path := filepath.Join(dir, fmt.Sprint("p", i))
		w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < benchEntries; j++ {
			wt.Name = fmt.Sprint("w", j)
			if err := w.Add(ctx, wt); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		os.Remove(path)
	}
}

// BenchmarkWritePackTiled: AddTiled (decode-verify + hash + write) of pre-tiled codes, then Commit.
func BenchmarkWritePackTiled(b *testing.B) {
	wt := benchWeight(b)
	e, _ := pack.Geometry(wt.Meta, 0)
	l, _ := e.Layout()
	tiled := make([]byte, l.Size())
	if err := l.Tile(tiled, wt.Codes); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchPackBytes(b, wt))
	dir := b.TempDir()
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		path := filepath.Join(dir, fmt.Sprint("t", i))
		w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < benchEntries; j++ {
			m := wt.Meta
			m.Name = fmt.Sprint("w", j)
			if err := w.AddTiled(ctx, m, bytes.NewReader(tiled), wt.Scales); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		os.Remove(path)
	}
}

// BenchmarkWriteVsPlain interleaves, in every iteration, a plain file write (+fsync) of the pack's byte count
// and the pack write (Add: tile, hash, write; Commit) of the same weights, and reports both throughputs and
// their ratio; interleaving keeps the ratio meaningful while the machine's load changes.
func BenchmarkWriteVsPlain(b *testing.B) {
	wt := benchWeight(b)
	total := benchPackBytes(b, wt)
	buf := make([]byte, total/benchEntries)
	dir := b.TempDir()
	ctx := context.Background()
	var tPlain, tPack time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		f, err := os.Create(filepath.Join(dir, "plain"))
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < benchEntries; j++ {
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		t1 := time.Now()
		path := filepath.Join(dir, "p.orkpack")
		w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
		if err != nil {
			b.Fatal(err)
		}
		for j := 0; j < benchEntries; j++ {
			wt.Name = fmt.Sprint("w", j)
			if err := w.Add(ctx, wt); err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		tPlain, tPack = tPlain+t1.Sub(t0), tPack+time.Since(t1)
		os.Remove(f.Name())
		os.Remove(path)
		n++
	}
	mb := float64(n) * float64(total) / 1e6
	b.ReportMetric(mb/tPlain.Seconds(), "plain-MB/s")
	b.ReportMetric(mb/tPack.Seconds(), "pack-MB/s")
	b.ReportMetric(tPlain.Seconds()/tPack.Seconds(), "pack/plain")
}
