package quant

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/gonum/mat"

	"orkpipe/internal/testfiles"
)

const benchK = 4096

var (
	benchOnce   sync.Once
	benchW      Matrix
	benchH      *Hessian
	baselineGF  float64
	baselineDur time.Duration
)

// benchSetup builds the 4096x4096 weight, a Hessian from 512 spiked tokens, and measures the
// baseline: one plain gonum mat.Dense.Mul of two 4096x4096 matrices (2·K³ flops; through
// OpenBLAS in the -tags blas build, see BLASBackend), in the same process as the benchmark it
// is compared with.
func benchSetup(b *testing.B) {
	benchOnce.Do(func() {
		var err error
		benchW, err = SyntheticWeight("bench.4096", benchK, benchK, 1)
		if err != nil {
			b.Fatal(err)
		}
		acts, err := SpikedActivations(512, benchK, 2)
		if err != nil {
			b.Fatal(err)
		}
		benchH = NewHessian(benchK)
		if err := benchH.Add(acts.Data, acts.Rows); err != nil {
			b.Fatal(err)
		}
		a := mat.NewDense(benchK, benchK, nil)
		c := mat.NewDense(benchK, benchK, nil)
		for i := 0; i < benchK; i++ {
			for j := 0; j < benchK; j++ {
				a.Set(i, j, float64(benchW.Data[i*benchK+j]))
			}
		}
		start := time.Now()
		c.Mul(a, a)
		baselineDur = time.Since(start)
		baselineGF = 2 * benchK * benchK * benchK / baselineDur.Seconds() / 1e9
		b.Logf("BLAS backend %s: baseline Dense.Mul %dx%d: %v, %.3g GFLOP/s", BLASBackend, benchK, benchK, baselineDur, baselineGF)
	})
}

// gptqFlops is the nominal flop count of GPTQ on an n x k weight, as counted when the factor of
// H⁻¹ took Cholesky of H (k³/3), its inverse from the factor (2k³/3) and the Cholesky of the
// inverse (k³/3) — the reflected route (cholesky.go) does 2k³/3 of that — plus the column updates
// (2·n·k², intra-block plus lazy batch). The count is kept so that rates stay comparable across
// versions: a rate above the BLAS's own is possible.
func gptqFlops(n, k int) float64 {
	kf := float64(k)
	return 4.0/3*kf*kf*kf + 2*float64(n)*kf*kf
}

func BenchmarkGPTQ4096(b *testing.B) { benchGPTQ(b) }

// BenchmarkGPTQ4096ScaleSearch is GPTQ with the scale levers: negative scales, candidates scored by
// GPTQ's loss over the group. Compare its s/gptq with BenchmarkGPTQ4096's from the same run.
func BenchmarkGPTQ4096ScaleSearch(b *testing.B) {
	benchGPTQ(b, WithNegativeScales(true), WithScaleSearch(ScaleSearchGPTQ))
}

// BenchmarkGPTQ4096Refit is GPTQ in groups of 32 with two rounds of scale refit (the w4a4-best
// recipe's); BenchmarkGPTQ4096Group32 is the same GPTQ without it. Their s/gptq from the same run
// give the refit's cost (its GFLOP/s count GPTQ's flops only).
func BenchmarkGPTQ4096Refit(b *testing.B) {
	benchGPTQ(b, WithGroup(32), WithScaleRefit(2, DefaultRefitSteps))
}

func BenchmarkGPTQ4096Group32(b *testing.B) { benchGPTQ(b, WithGroup(32)) }

// BenchmarkGPTQ4096RotSearch is rotated GPTQ in groups of 32 after scoring eight rotation seeds
// (w4a8-best's rotation_search: 8); BenchmarkGPTQ4096Rot is the same GPTQ with its one seed. Their
// s/gptq from the same run give the search's cost (its GFLOP/s count GPTQ's flops only).
func BenchmarkGPTQ4096RotSearch(b *testing.B) {
	benchGPTQ(b, WithGroup(32), WithRotation(true, 1), WithRotationSearch(8))
}

func BenchmarkGPTQ4096Rot(b *testing.B) { benchGPTQ(b, WithGroup(32), WithRotation(true, 1)) }

func benchGPTQ(b *testing.B, opts ...Option) {
	benchSetup(b)
	ctx := context.Background()
	opts = append([]Option{WithWorkers(runtime.GOMAXPROCS(0))}, opts...)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := GPTQ(ctx, benchW, benchH, opts...); err != nil {
			b.Fatal(err)
		}
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	gf := gptqFlops(benchK, benchK) / sec / 1e9
	b.ReportMetric(sec, "s/gptq")
	b.ReportMetric(gf, "GFLOP/s")
	b.ReportMetric(baselineGF, "baseline-matmul-GFLOP/s")
	b.ReportMetric(gf/baselineGF, "ratio-vs-matmul")
}

func benchRTN(b *testing.B, grid []float64, opts ...Option) {
	benchSetup(b)
	ctx := context.Background()
	opts = append([]Option{WithGroup(32), WithClipGrid(grid), WithWorkers(runtime.GOMAXPROCS(0))}, opts...)
	b.SetBytes(int64(len(benchW.Data) * 4))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := RTN(ctx, benchW, nil, opts...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRTNClip4096 is RTN with the default 8-factor clip grid; BenchmarkRTNNoClip4096, the
// baseline, is plain round-to-nearest (grid {1}). Compare their MB/s from the same run.
func BenchmarkRTNClip4096(b *testing.B)   { benchRTN(b, DefaultClipGrid) }
func BenchmarkRTNNoClip4096(b *testing.B) { benchRTN(b, []float64{1}) }

// BenchmarkRTNClip4096Sign is BenchmarkRTNClip4096 with negative scales (twice the candidates).
func BenchmarkRTNClip4096Sign(b *testing.B) { benchRTN(b, DefaultClipGrid, WithNegativeScales(true)) }

// benchTokens is BenchmarkMatMulInt's batch: one calibration sequence, the rows propagate and
// screen run through a weight at once (calib.BatchRows).
const benchTokens = 512

// BenchmarkMatMulInt measures the W4A8 integer matmul on 512 tokens x a 4096x4096 G32 weight,
// reported as int8 MAC GOP/s: the VNNI panel kernel, the AVX2 one and the Go group loop, same run.
func BenchmarkMatMulInt(b *testing.B) {
	benchSetup(b)
	ctx := context.Background()
	q, err := RTN(ctx, benchW, nil, WithGroup(32))
	if err != nil {
		b.Fatal(err)
	}
	acts, err := SpikedActivations(benchTokens, benchK, 3)
	if err != nil {
		b.Fatal(err)
	}
	a, err := QuantizeActivations(acts.Data, benchTokens, benchK, 8, 1)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]float32, benchTokens*benchK)
	for _, path := range []struct {
		name               string
		vnni, avx2, packed bool
	}{{"vnni", true, false, false}, {"vnni-packed", true, false, true}, {"avx2", false, true, false},
		{"avx2-packed", false, true, true}, {"loop", false, false, false}} {
		b.Run(path.name, func(b *testing.B) {
			if path.vnni && !useVNNI {
				testfiles.SkipCPU(b, "no AVX-512 VNNI on this CPU")
			}
			if path.avx2 && !useAVX2Panels {
				testfiles.SkipCPU(b, "no AVX2 on this CPU")
			}
			defer func(vnni, avx2 bool) { useVNNI, useAVX2Panels = vnni, avx2 }(useVNNI, useAVX2Panels)
			useVNNI, useAVX2Panels = path.vnni, path.avx2
			var panels *Panels // "-packed": the weight's panels packed once (PackPanels), as an emulated weight holds them
			if path.packed {
				var err error
				if panels, err = PackPanels(ctx, q, runtime.GOMAXPROCS(0)); err != nil || panels == nil {
					b.Fatalf("PackPanels: %v, %v", panels, err)
				}
				b.ResetTimer()
			}
			for i := 0; i < b.N; i++ {
				var err error
				if panels != nil {
					err = MatMulIntPacked(ctx, a, panels, out, runtime.GOMAXPROCS(0))
				} else {
					err = MatMulInt(ctx, a, q, out, runtime.GOMAXPROCS(0))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(2*benchTokens*benchK*benchK/sec/1e9, "GOP/s")
			b.ReportMetric(baselineGF, "baseline-matmul-GFLOP/s")
		})
	}
}

// BenchmarkQuantizeRows is RTN's per-row work alone (clip search, codes, qerr terms) on 64 rows of
// 4096 values, group 32, with the default grid and with none ({1}), in the same run: "f32" is
// quantizeRow32 on the float32 rows (the float32 search, kernel.GroupSearch16 on AVX-512, or for
// {1} kernel.RowOne16x8; on AVX2 kernel.RowSearch16x2 or kernel.RowOne16x8AVX2); "f32groups"
// without the row kernels, group by group; "f32w" and "f32wgroups" the same weighted by an
// importance (the row kernel on AVX2; group by group);
// "f32avx2" its AVX2 kernels, what a CPU with AVX2 but no AVX-512 runs; "f32go" its pure-Go
// reference); "f64"
// is session 6's path, each row widened to float64 and quantizeRow with every float64 kernel
// this CPU has (the AVX-512 GroupSearch8 for the default grid, the one-pass GroupQuant1 for
// {1}); "avx2" is session 4's, the AVX2 search (ClipErrs8 or ClipErrs4 and the Go loops around
// them) then a codes pass.
func BenchmarkQuantizeRows(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n, k, group = 64, 4096, 32
	x := make([]float64, n*k)
	x32 := make([]float32, n*k)
	for i := range x {
		x32[i] = float32(rng.NormFloat64() * 0.02)
		x[i] = float64(x32[i])
	}
	imp := make([]float64, k) // an importance, as an imatrix gives it
	for i := range imp {
		imp[i] = rng.ExpFloat64()
	}
	wd32, wd64 := weights32(imp)
	for _, grid := range []struct {
		name string
		g    []float64
	}{{"clip", DefaultClipGrid}, {"noclip", []float64{1}}} {
		w := &Weight{N: n, K: k, KP: k, Bits: 4, Group: group, Codes: make([]int8, n*k), Scales: make([]float32, n*k/group)}
		cs := newClipScratch(len(grid.g))
		s32 := newSearch32(grid.g, k)
		b.Run(grid.name+"/f32", func(b *testing.B) {
			b.SetBytes(int64(n * k * 4))
			for b.Loop() {
				for r := 0; r < n; r++ {
					quantizeRow32(w, r, w.Codes[r*k:(r+1)*k], x32[r*k:(r+1)*k], nil, nil, grid.g, s32)
				}
			}
		})
		b.Run(grid.name+"/f32groups", func(b *testing.B) {
			defer func(old bool) { rowKernels32 = old }(rowKernels32)
			rowKernels32 = false
			b.SetBytes(int64(n * k * 4))
			for b.Loop() {
				for r := 0; r < n; r++ {
					quantizeRow32(w, r, w.Codes[r*k:(r+1)*k], x32[r*k:(r+1)*k], nil, nil, grid.g, s32)
				}
			}
		})
		for _, kernels := range []bool{true, false} {
			name := grid.name + "/f32w"
			if !kernels {
				name += "groups"
			}
			b.Run(name, func(b *testing.B) {
				defer func(old bool) { rowKernels32 = old }(rowKernels32)
				rowKernels32 = kernels
				b.SetBytes(int64(n * k * 4))
				for b.Loop() {
					for r := 0; r < n; r++ {
						quantizeRow32(w, r, w.Codes[r*k:(r+1)*k], x32[r*k:(r+1)*k], wd32, wd64, grid.g, s32)
					}
				}
			})
		}
		b.Run(grid.name+"/f32avx2", func(b *testing.B) {
			defer func(old int) { search32Path = old }(search32Path)
			search32Path = path32AVX2
			b.SetBytes(int64(n * k * 4))
			for b.Loop() {
				for r := 0; r < n; r++ {
					quantizeRow32(w, r, w.Codes[r*k:(r+1)*k], x32[r*k:(r+1)*k], nil, nil, grid.g, s32)
				}
			}
		})
		b.Run(grid.name+"/f32go", func(b *testing.B) {
			defer func(old int) { search32Path = old }(search32Path)
			search32Path = path32Go
			b.SetBytes(int64(n * k * 4))
			for b.Loop() {
				for r := 0; r < n; r++ {
					quantizeRow32(w, r, w.Codes[r*k:(r+1)*k], x32[r*k:(r+1)*k], nil, nil, grid.g, s32)
				}
			}
		})
		buf := make([]float64, k)
		b.Run(grid.name+"/f64", func(b *testing.B) {
			b.SetBytes(int64(n * k * 4))
			for b.Loop() {
				for r := 0; r < n; r++ {
					for c, v := range x32[r*k : (r+1)*k] {
						buf[c] = float64(v)
					}
					quantizeRow(w, r, w.Codes[r*k:(r+1)*k], buf, nil, grid.g, cs)
				}
			}
		})
		b.Run(grid.name+"/avx2", func(b *testing.B) {
			defer func(old bool) { search512 = old }(search512)
			search512 = false
			b.SetBytes(int64(n * k * 4))
			for b.Loop() {
				for r := 0; r < n; r++ {
					row := x[r*k : (r+1)*k]
					for g := 0; g < k; g += group {
						s, _, _ := searchGroup(row[g:g+group], nil, 4, grid.g, cs)
						w.Scales[(r*k+g)/group] = s
						quantizeWith(w.Codes[r*k+g:r*k+g+group], row[g:g+group], s, 4)
					}
				}
			}
		})
	}
}
