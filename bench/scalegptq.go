package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/ork/quant"
)

// gemmResult is what `bench -worker gemm` prints: the build's dgemm rate per second of wall time and
// per CPU-second (user + system of the process, its BLAS threads included), each the best of 3.
type gemmResult struct {
	Backend       string  `json:"backend"`
	DgemmGFLOP    float64 `json:"dgemm_gflops"`
	DgemmCPUGFLOP float64 `json:"dgemm_cpu_gflops"`
}

// runGemmWorker is the worker mode that measures the build's dgemm alone (gonum blas64 Gemm of
// matmulDim³, what GPTQ's products call), the reference of a row whose subject is a whole build.
func runGemmWorker(w io.Writer) error {
	const d = matmulDim
	a, c := make([]float64, d*d), make([]float64, d*d)
	for i := range a {
		a[i] = float64((i*31)%101)/101 - 0.5
	}
	am := blas64.General{Rows: d, Cols: d, Stride: d, Data: a}
	cm := blas64.General{Rows: d, Cols: d, Stride: d, Data: c}
	var wall, cpu time.Duration
	for i := 0; i < 3; i++ {
		c0, t0 := processCPU(), time.Now()
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, am, am, 0, cm)
		el, ce := time.Since(t0), processCPU()-c0
		if i == 0 || el < wall {
			wall = el
		}
		if i == 0 || ce < cpu {
			cpu = ce
		}
	}
	return json.NewEncoder(w).Encode(gemmResult{Backend: quant.BLASBackend,
		DgemmGFLOP: matmulFlops() / wall.Seconds() / 1e9, DgemmCPUGFLOP: matmulFlops() / cpu.Seconds() / 1e9})
}

// layerGPTQFlops is the GPTQ work of one layer of s when every matmul weight is GPTQ: gptqFlops
// (4/3·K³ + 2·N·K²) of attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up and ffn_down, with
// head_dim = n_embd / heads.
func layerGPTQFlops(s shape) float64 {
	kv := s.Embd / s.Heads * s.HeadsKV
	return gptqFlops(s.Embd, s.Embd) + 2*gptqFlops(kv, s.Embd) + gptqFlops(s.Embd, s.Embd) +
		2*gptqFlops(s.FF, s.Embd) + gptqFlops(s.Embd, s.FF)
}

// gemmStep measures the dgemm rate of the harness built like the orkpipe under test (-tags blas or
// not) in a worker process, as a reference measure: its samples are the seconds of one 2048³ dgemm.
func (e *env) gemmStep(m *Measure) step {
	bin := e.self
	if e.blas {
		bin = e.blasSelf
	}
	m.Command = "bench -worker gemm (gonum blas64 Gemm " + fmt.Sprint(matmulDim) + "³, best of 2)"
	if bin == "" {
		m.Skipped = "skipped: " + e.blasErr
	}
	return step{m: m, run: func() (time.Duration, int64, error) {
		var out bytes.Buffer
		if _, _, err := e.command(&out, bin, "-worker", "gemm"); err != nil {
			return 0, 0, err
		}
		var res gemmResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.DgemmGFLOP <= 0 || res.DgemmCPUGFLOP <= 0 {
			return 0, 0, fmt.Errorf("gemm worker output %q: %v", out.String(), err)
		}
		m.CPU = append(m.CPU, matmulFlops()/res.DgemmCPUGFLOP/1e9)
		return time.Duration(matmulFlops() / res.DgemmGFLOP / 1e9 * float64(time.Second)), 0, nil
	}}
}

// matmulFlops is the flop count of the reference matmul (2·d³).
func matmulFlops() float64 { return 2 * float64(matmulDim) * matmulDim * matmulDim }

// gptqShares fills the GPTQ rate and share of a scale-gptq row once its medians are known: each
// build's GPTQ flops (layers × layerGPTQFlops) at the reference's median dgemm rate, over the build's
// median wall time — and, in CPU time, at the dgemm rate per CPU-second over the build's CPU seconds,
// which a shared machine's load distorts far less; with two or more sizes, the same per layer against
// the fitted seconds (wall and CPU) per layer (the row's Note says so).
func gptqShares(r *Row, s shape) {
	r.finish()
	ref := r.measure(dgemmLabel)
	if ref == nil || ref.Skipped != "" || ref.Stats.Median <= 0 {
		return
	}
	dgemm := matmulFlops() / ref.Stats.Median / 1e9
	ref.GFLOPS = dgemm
	dgemmCPU := 0.0
	if len(ref.CPU) > 0 {
		dgemmCPU = matmulFlops() / Summarize(ref.CPU).Median / 1e9
		ref.Extra = fmt.Sprintf("%.1f GFLOP/s per CPU-second", dgemmCPU)
	}
	per := layerGPTQFlops(s)
	var xs, cpus []float64
	for i := range r.Measures {
		m := &r.Measures[i]
		if m.Role != "subject" || m.Skipped != "" || m.Stats.Median <= 0 || m.X <= 0 {
			continue
		}
		flops := per * m.X
		m.GFLOPS = flops / m.Stats.Median / 1e9
		m.Share = m.GFLOPS / dgemm
		m.Extra = fmt.Sprintf("GPTQ %.3g flops, %.1f GFLOP/s over the whole build = %.0f%% of the dgemm rate", flops, m.GFLOPS, 100*m.Share)
		if c := Summarize(m.CPU).Median; dgemmCPU > 0 && c > 0 {
			m.Extra += fmt.Sprintf("; CPU %.1f s: %.1f GFLOP/s per CPU-second = %.0f%% of dgemm's", c, flops/c/1e9, 100*flops/c/1e9/dgemmCPU)
			xs, cpus = append(xs, m.X), append(cpus, c)
		}
	}
	if r.Fit != nil && r.Fit.Slope > 0 {
		layer := per / r.Fit.Slope / 1e9
		r.Note += fmt.Sprintf("; per layer (fit slope %.1f s): GPTQ %.3g flops at %.1f GFLOP/s = %.0f%% of the dgemm rate (%.1f GFLOP/s, same run)",
			r.Fit.Slope, per, layer, 100*layer/dgemm, dgemm)
	}
	if share, slope, ok := cpuLayerShare(xs, cpus, per, dgemmCPU); ok {
		r.Note += fmt.Sprintf("; per layer in CPU time (%.1f CPU-s a layer): **%.0f%% of dgemm's rate per CPU-second** (%.1f)", slope, 100*share, dgemmCPU)
	}
}

// cpuLayerShare is GPTQ's share of the dgemm rate per CPU-second over one layer: per flops over the
// CPU seconds a layer takes — the slope of CPU seconds against layers with two or more sizes, else the
// one-layer build's CPU seconds.
func cpuLayerShare(xs, cpus []float64, per, dgemmCPU float64) (share, slope float64, ok bool) {
	if dgemmCPU <= 0 {
		return 0, 0, false
	}
	if f, err := LinearFit(xs, cpus); err == nil && f.Slope > 0 {
		slope = f.Slope
	} else {
		for i, x := range xs {
			if x == 1 {
				slope = cpus[i]
			}
		}
	}
	if slope <= 0 {
		return 0, 0, false
	}
	return per / slope / 1e9 / dgemmCPU, slope, true
}

// dgemmLabel is the scale-gptq row's reference measure.
const dgemmLabel = "dgemm 2048³ (the build's BLAS)"

// gptqLayerShare is a scale-gptq row's GPTQ share of the dgemm rate per layer in CPU time (see
// gptqShares), from the measures' CPU seconds.
func gptqLayerShare(r *Row) (float64, bool) {
	if r == nil {
		return 0, false
	}
	ref := r.measure(dgemmLabel)
	if ref == nil || ref.Skipped != "" || len(ref.CPU) == 0 {
		return 0, false
	}
	var xs, cpus []float64
	for _, m := range r.Measures {
		if c := Summarize(m.CPU).Median; m.Role == "subject" && m.X > 0 && c > 0 {
			xs, cpus = append(xs, m.X), append(cpus, c)
		}
	}
	share, _, ok := cpuLayerShare(xs, cpus, layerGPTQFlops(shape27B(1)), matmulFlops()/Summarize(ref.CPU).Median/1e9)
	return share, ok
}
