// Package hostspeed measures how fast this host runs the kernels the stages' cost model is written
// for (pipelines/build, workcost.go), against the reference host the model's rates were measured on,
// so that the first plan of a build on another host (no AVX-512, OpenBLAS, a faster or slower core)
// estimates its time from this host's speed, not the reference host's.
//
// Five kinds of work, each timed on a small problem of fixed size through the entry points the
// stages call, so that a -tags blas build times OpenBLAS where its stages run OpenBLAS:
//
//   - Forward: the float32 products of a forward pass over a Q8_0 weight (model.Encoded.Apply: the
//     source's weights in calibrate and screen);
//   - Hessian: the float64 update of a Hessian's upper triangle (calib.AddGram, calibrate);
//   - Dgemm: GPTQ's lazy column update, C -= A·B through blas64 (finalize);
//   - IntMatMul: the pack's integer matmul, 8-bit activations by 4-bit codes in groups of 32, from
//     panels packed once as model.Emulated holds them (quant.MatMulIntPacked: propagate, screen's
//     pack);
//   - Scalar: round to nearest with the default clip search (quant.RTN: the Go loops of rtn, tile,
//     synth, GPTQ's row phase and the stages' decoding).
//
// Each runs on at most two goroutines (GOMAXPROCS is lowered while Measure runs: the reference host
// had two cores), a run at a time with a garbage collection between runs (so that a run's
// allocations reuse pages, not fault fresh ones in), until it has run minRuns times and for minTime,
// in each of two rounds over the five; its speed is the reference host's best time over this host's,
// per core. The problems fit in the
// caches, so a speed is the kernels', not the memory's; how the kinds mix in each stage is the cost
// model's (pipelines/build). Measure takes about half a second; a cache keeps what it measured
// per host (Host) and binary (pipelines/progress, LoadHostSpeeds).
package hostspeed

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/cpu"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/ork/quant"
)

// Speeds is this host's speed per core for each kind of work (the package doc), relative to the
// reference host's: 1 is as fast, 2 twice as fast. A cost the model gives in the reference host's
// nanoseconds takes cost/speed of this host's.
type Speeds struct {
	Forward   float64 `json:"forward"`
	Hessian   float64 `json:"hessian"`
	Dgemm     float64 `json:"dgemm"`
	IntMatMul float64 `json:"intmatmul"`
	Scalar    float64 `json:"scalar"`
}

// Reference is the reference host's own speeds.
var Reference = Speeds{Forward: 1, Hessian: 1, Dgemm: 1, IntMatMul: 1, Scalar: 1}

// Validate checks that every speed is finite and within [MinSpeed, MaxSpeed].
func (s Speeds) Validate() error {
	for _, f := range s.fields() {
		if !(*f.v >= MinSpeed && *f.v <= MaxSpeed) {
			return fmt.Errorf("host speed %s %v: want %v to %v", f.name, *f.v, MinSpeed, MaxSpeed)
		}
	}
	return nil
}

// The range a speed may take: a host 100 times slower or faster than the reference is a
// measurement gone wrong.
const (
	MinSpeed = 0.01
	MaxSpeed = 100
)

type field struct {
	name string
	v    *float64
}

func (s *Speeds) fields() []field {
	return []field{{"forward", &s.Forward}, {"hessian", &s.Hessian}, {"dgemm", &s.Dgemm}, {"intmatmul", &s.IntMatMul}, {"scalar", &s.Scalar}}
}

// The problems' sizes: k input features, n outputs, t tokens.
const (
	probeK = 1024
	probeN = 512
	probeT = 256

	// probeProcs is the reference host's cores, on which referenceNS were measured.
	probeProcs = 2
	minRuns    = 3
	minTime    = 20 * time.Millisecond
	rounds     = 2
)

// referenceNS is each probe's best wall time on the reference host (two Zen 5 cores, AVX-512, the
// pure-Go kernels), in the order of Speeds' fields: the means of two sets' medians of twelve first
// plans' probes, each in a fresh cache, an hour apart (the host drifted ~8% between them); the
// integer matmul's, from panels packed once, from the second set, scaled by the other probes' drift
// (docs/performance-log.md, "Session 56").
var referenceNS = [5]float64{1.038e6, 2.05e6, 1.07e6, 1.308e6, 0.649e6}

// Host describes what decides this host's speeds besides the binary: the CPU's model and the
// instruction sets the kernels choose from (as x/sys/cpu reports them, GODEBUG's cpu.* settings
// applied), and the environment that changes the kernels' choice or threads (GODEBUG,
// OPENBLAS_CORETYPE, OPENBLAS_NUM_THREADS).
func Host() string {
	var b strings.Builder
	b.WriteString(cpuModel())
	fmt.Fprintf(&b, "; %s/%s", runtime.GOOS, runtime.GOARCH)
	if runtime.GOARCH == "amd64" {
		fmt.Fprintf(&b, " avx2=%v fma=%v avx512f=%v avx512dq=%v avx512vl=%v", cpu.X86.HasAVX2, cpu.X86.HasFMA,
			cpu.X86.HasAVX512F, cpu.X86.HasAVX512DQ, cpu.X86.HasAVX512VL)
	}
	for _, v := range []string{"GODEBUG", "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS"} {
		if s, ok := os.LookupEnv(v); ok {
			fmt.Fprintf(&b, "; %s=%s", v, s)
		}
	}
	return b.String()
}

// cpuModel is /proc/cpuinfo's first "model name" (Linux), else "unknown CPU".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// Measure times this host's kernels and returns their speeds, each within [MinSpeed, MaxSpeed]. It
// lowers GOMAXPROCS to two while it runs (other goroutines of the process run slower meanwhile), and
// honours ctx between runs.
func Measure(ctx context.Context) (Speeds, error) {
	p, err := newProblems()
	if err != nil {
		return Speeds{}, err
	}
	procs := min(probeProcs, runtime.NumCPU())
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	ns, err := p.time(ctx)
	if err != nil {
		return Speeds{}, err
	}
	var s Speeds
	for i, f := range s.fields() {
		// Per core: the reference's CPU time (two cores) over this host's (procs cores).
		*f.v = min(MaxSpeed, max(MinSpeed, referenceNS[i]*probeProcs/(ns[i]*float64(procs))))
	}
	return s, nil
}

// problems holds the probes' inputs, made once.
type problems struct {
	enc     *model.Encoded     // n×k, Q8_0
	x       []float32          // t×k activations
	y       []float32          // t×wideN outputs
	x64     []float64          // t×k, the Hessian update's rows
	c       []float64          // k×k, its triangle
	a, b, d blas64.General     // the Dgemm's operands: d -= a·b
	w       quant.Matrix       // n×k float weight, round to nearest's
	acts    *quant.Activations // x quantized to 8 bits per token
	packed  *quant.Weight      // wideN×k, 4-bit codes in groups of 32: the integer matmul's weight
	panels  *quant.Panels      // packed's codes as the panel kernels read them, when they take it
}

// wideN is the integer matmul's outputs: its products, not the activations' quantization, dominate,
// as they do at a 27B's widths.
const wideN = 4 * probeN

func newProblems() (*problems, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := &problems{x: make([]float32, probeT*probeK), y: make([]float32, probeT*wideN),
		x64: make([]float64, probeT*probeK), c: make([]float64, probeK*probeK)}
	for i := range p.x {
		v := float32(rng.NormFloat64())
		if i%probeK == 7 {
			v *= 20 // an outlier channel, as activations have
		}
		p.x[i], p.x64[i] = v, float64(v)
	}
	normal := func(n int, scale float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64() * scale
		}
		return v
	}
	// GPTQ's lazy updates: a block of 128 columns of the codes' errors times the factor's rows.
	p.a = blas64.General{Rows: probeN, Cols: gptqBlock, Stride: gptqBlock, Data: normal(probeN*gptqBlock, 1)}
	p.b = blas64.General{Rows: gptqBlock, Cols: probeK, Stride: probeK, Data: normal(gptqBlock*probeK, 1)}
	p.d = blas64.General{Rows: probeN, Cols: probeK, Stride: probeK, Data: normal(probeN*probeK, 1)}
	wide := make([]float32, wideN*probeK)
	for i := range wide {
		wide[i] = float32(rng.NormFloat64() * 0.02)
	}
	raw := make([]byte, probeN*probeK/32*34)
	if err := gguf.Quantize(gguf.TypeQ8_0, wide[:probeN*probeK], raw); err != nil {
		return nil, fmt.Errorf("host speed probe: %w", err)
	}
	enc, err := model.NewEncoded(gguf.TypeQ8_0, probeN, probeK, raw)
	if err != nil {
		return nil, fmt.Errorf("host speed probe: %w", err)
	}
	p.enc = enc
	p.w = quant.Matrix{Name: "host speed probe", Rows: probeN, Cols: probeK, Data: wide[:probeN*probeK]}
	p.packed, err = quant.RTN(context.Background(), quant.Matrix{Name: "host speed probe", Rows: wideN, Cols: probeK, Data: wide},
		nil, quant.WithBits(4), quant.WithGroup(32), quant.WithClipGrid([]float64{1}))
	if err != nil {
		return nil, fmt.Errorf("host speed probe: %w", err)
	}
	if p.acts, err = quant.QuantizeActivations(p.x, probeT, probeK, 8, 1); err != nil {
		return nil, fmt.Errorf("host speed probe: %w", err)
	}
	if p.panels, err = quant.PackPanels(context.Background(), p.packed, 1); err != nil {
		return nil, fmt.Errorf("host speed probe: %w", err)
	}
	return p, nil
}

// gptqBlock is GPTQ's block of columns (quant.WithBlockSize's default).
const gptqBlock = 128

// probeOrder is the order the probes run in: Scalar, IntMatMul, then those that call BLAS.
var probeOrder = [5]int{4, 3, 0, 1, 2}

// time returns each probe's best wall time in ns, in the order of Speeds' fields.
func (p *problems) time(ctx context.Context) ([5]float64, error) {
	workers := runtime.GOMAXPROCS(0)
	probes := [5]func() error{
		func() error { return p.enc.Apply(p.y[:probeT*probeN], p.x) },
		func() error { calib.AddGram(p.c, probeK, p.x64, probeT); return nil },
		func() error { blas64.Gemm(blas.NoTrans, blas.NoTrans, -1, p.a, p.b, 1, p.d); return nil },
		p.intMatMul(ctx, workers),
		func() error { _, err := quant.RTN(ctx, p.w, nil, quant.WithBits(4), quant.WithGroup(32)); return err },
	}
	best := [5]float64{math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)}
	// Every probe in each of rounds, so that a burst of another guest's load on a shared host spoils
	// one round's time of a probe, not its best. The Go loops first in a round: in a -tags blas
	// build, OpenBLAS's threads spin for a while after each call, taking the cores from whatever runs
	// next (the integer matmul timed after the BLAS probes ran at 0.4x its speed in situ).
	for range rounds {
		for _, i := range probeOrder {
			run := probes[i]
			var spent time.Duration
			for n := 0; n < minRuns+1 || spent < minTime; n++ { // the first run warms up, untimed
				if err := ctx.Err(); err != nil {
					return best, fmt.Errorf("host speed probe: %w", err)
				}
				start := time.Now()
				if err := run(); err != nil {
					return best, fmt.Errorf("host speed probe: %w", err)
				}
				d := time.Since(start)
				// What the run allocated is collected before the next, whose allocations then reuse
				// its pages: a fresh page's fault (dear on a virtual machine) is not the kernel's cost.
				runtime.GC()
				if n > 0 {
					spent += d
					best[i] = min(best[i], max(1, float64(d.Nanoseconds())))
				}
			}
		}
	}
	return best, nil
}

// intMatMul is the integer matmul as an emulated weight runs it: from panels packed once
// (model.Emulated), or, on a CPU without a panel kernel, MatMulInt's loop.
func (p *problems) intMatMul(ctx context.Context, workers int) func() error {
	if p.panels != nil {
		return func() error { return quant.MatMulIntPacked(ctx, p.acts, p.panels, p.y, workers) }
	}
	return func() error { return quant.MatMulInt(ctx, p.acts, p.packed, p.y, workers) }
}
