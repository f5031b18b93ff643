package gguf

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
)

// Every benchmark here times a subject and a baseline in the same run and reports
// subject-MB/s, baseline-MB/s and ratio (subject time / baseline time; lower is better).

func reportPair(b *testing.B, bytesPerOp int64, base, subject func() error) {
	b.Helper()
	var tb, ts time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := base(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := subject(); err != nil {
			b.Fatal(err)
		}
		tb, ts = tb+t1.Sub(t0), ts+time.Since(t1)
	}
	mb := float64(bytesPerOp) * float64(b.N) / 1e6
	b.ReportMetric(mb/ts.Seconds(), "subject-MB/s")
	b.ReportMetric(mb/tb.Seconds(), "baseline-MB/s")
	b.ReportMetric(ts.Seconds()/tb.Seconds(), "ratio")
}

// header27B is a 400-tensor header shaped like the 27B hybrid of DESIGN.md (64 layers).
func header27B() Header {
	h := Header{KV: []KV{
		{"general.architecture", String("llama")}, {"general.name", String("synthetic-27b")},
		{"llama.block_count", Uint32(64)}, {"llama.embedding_length", Uint32(5120)},
		{"llama.feed_forward_length", Uint32(17408)},
	}}
	names := []struct {
		n    string
		k, m int64
	}{{"attn_q", 5120, 5120}, {"attn_k", 5120, 1024}, {"attn_v", 5120, 1024}, {"attn_output", 5120, 5120},
		{"ffn_gate", 5120, 17408}, {"ffn_up", 5120, 17408}}
	for l := 0; len(h.Tensors) < 400; l++ {
		for _, w := range names {
			if len(h.Tensors) == 400 {
				break
			}
			h.Tensors = append(h.Tensors, TensorInfo{Name: fmt.Sprintf("blk.%d.%s.weight", l, w.n), Type: TypeQ8_0, Shape: []int64{w.k, w.m}})
		}
	}
	return h
}

// headerOnly is an io.ReaderAt holding a header; the data region is never read by Parse.
type headerOnly []byte

func (h headerOnly) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(h)) {
		return 0, io.EOF
	}
	n := copy(p, h[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func BenchmarkParseHeader400(b *testing.B) {
	l, hdr, err := Plan(header27B())
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, len(hdr))
	reportPair(b, int64(len(hdr)),
		func() error { copy(dst, hdr); return nil }, // baseline: copying the header bytes
		func() error {
			f, err := Parse(context.Background(), headerOnly(hdr), l.Size, "bench.gguf")
			if err == nil && len(f.Tensors) != 400 {
				err = fmt.Errorf("%d tensors", len(f.Tensors))
			}
			return err
		})
	b.ReportMetric(float64(len(hdr)), "header-bytes")
}

// randomBlocks returns n blocks of type t with random payload and sane f16 scales.
func randomBlocks(t Type, n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	bb := t.BlockBytes()
	src := make([]byte, n*bb)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		blk := src[i*bb : (i+1)*bb]
		switch t {
		case TypeQ8_0:
			binary.LittleEndian.PutUint16(blk, F32ToF16(0.01))
		case TypeQ4_K:
			binary.LittleEndian.PutUint16(blk, F32ToF16(0.01))
			binary.LittleEndian.PutUint16(blk[2:], F32ToF16(0.002))
		}
	}
	return src
}

func BenchmarkDequantize(b *testing.B) {
	const k, rows = 4096, 256 // 1 Mi elements, 4 MiB of float32 out
	for _, t := range []Type{TypeQ8_0, TypeQ4_K, TypeBF16, TypeQ6_K, TypeQ4_0, TypeF16} {
		b.Run(t.String(), func(b *testing.B) {
			n := k * rows / t.BlockSize()
			src := randomBlocks(t, n)
			dst := make([]float32, k*rows)
			plain := make([]byte, 4*k*rows)
			out := make([]byte, 4*k*rows)
			// Bytes per op = float32 output; baseline = memmove of the same output size.
			reportPair(b, int64(4*k*rows),
				func() error { copy(out, plain); return nil },
				func() error {
					for r := 0; r < rows; r++ {
						rb := len(src) / rows
						if err := Dequantize(t, src[r*rb:(r+1)*rb], dst[r*k:(r+1)*k]); err != nil {
							return err
						}
					}
					return nil
				})
			b.ReportMetric(float64(len(src))/float64(4*k*rows), "in/out-bytes")
		})
	}
}

var (
	bigOnce sync.Once
	bigPath string
	bigErr  error
)

// bigSource writes (once per process) a 2 GiB GGUF of 64 Q8_0 tensors of 32 MiB in a temp
// directory; ORKPIPE_BENCH_DIR overrides where (it must have 2 GiB free, three times over).
func bigSource(b *testing.B) string {
	bigOnce.Do(func() {
		dir := os.Getenv("ORKPIPE_BENCH_DIR")
		if dir == "" {
			dir = os.TempDir()
		}
		dir, bigErr = os.MkdirTemp(dir, "gguf-bench-")
		if bigErr != nil {
			return
		}
		h := Header{KV: []KV{{"general.name", String("bench-2GiB")}}}
		const k, rows = 8192, 1 << 12 // 8192*4096 Q8_0 = 35.65 MB per tensor
		for i := 0; len(h.Tensors) < 60; i++ {
			h.Tensors = append(h.Tensors, TensorInfo{Name: fmt.Sprintf("blk.%d.ffn_up.weight", i), Type: TypeQ8_0, Shape: []int64{k, rows}})
		}
		payload := randomBlocks(TypeQ8_0, k*rows/32)
		bigPath = filepath.Join(dir, "big.gguf")
		f, err := os.Create(bigPath)
		if err != nil {
			bigErr = err
			return
		}
		_, bigErr = Write(context.Background(), f, h, func(_ context.Context, _ int, _ TensorInfo, w io.Writer) error {
			_, err := w.Write(payload)
			return err
		})
		if err := f.Close(); bigErr == nil {
			bigErr = err
		}
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigPath
}

func BenchmarkEmitStub2GiB(b *testing.B) {
	if testing.Short() {
		testfiles.SkipShort(b, "writes 2 GiB files")
	}
	srcPath := bigSource(b)
	b.Cleanup(func() { os.RemoveAll(filepath.Dir(srcPath)) })
	ctx := context.Background()
	src, err := Open(ctx, srcPath)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	outDir := filepath.Dir(srcPath)
	plainCopy := func() error {
		dst := filepath.Join(outDir, "copy.gguf")
		in, err := os.Open(srcPath)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(dst)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			return err
		}
		if err := out.Sync(); err != nil {
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		return os.Remove(dst)
	}
	for _, tc := range []struct {
		name  string
		every int // own every n-th tensor; 0 owns none
	}{{"own-none", 0}, {"own-half", 2}, {"own-all", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			owned := NameSet{}
			for i, t := range src.Tensors {
				if tc.every > 0 && i%tc.every == 0 {
					owned[t.Name] = struct{}{}
				}
			}
			stub := func() error {
				dst := filepath.Join(outDir, "stub.gguf")
				if _, err := EmitStub(ctx, src, owned, dst); err != nil {
					return err
				}
				return os.Remove(dst)
			}
			reportPair(b, src.Size, plainCopy, stub)
		})
	}
}

// BenchmarkDequantizeF16Chunk: F16 weights (finite, as a model's are) converted one cache-sized chunk
// at a time, as RTN reads rows: the F16C kernel (subject) against the table alone (baseline).
func BenchmarkDequantizeF16Chunk(b *testing.B) {
	if !hasF16C {
		testfiles.SkipCPU(b, "this CPU has no F16C/AVX2: the table is the only path")
	}
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 2*64*1024)
	for i := 0; i < len(src)/2; i++ {
		binary.LittleEndian.PutUint16(src[2*i:], F32ToF16(float32(r.NormFloat64()*0.02)))
	}
	dst := make([]float32, len(src)/2)
	defer func() { hasF16C = true }()
	with := func(kernel bool) func() error {
		return func() error {
			hasF16C = kernel
			return Dequantize(TypeF16, src, dst)
		}
	}
	reportPair(b, int64(len(src)), with(false), with(true))
}
