package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"orkpipe/ork/quant"
)

// gemmResult is what `bench -worker gemm` prints: the build's own sgemm and dgemm rates (gemmRates).
type gemmResult struct {
	Backend    string  `json:"backend"`
	SgemmGFLOP float64 `json:"sgemm_gflops"`
	DgemmGFLOP float64 `json:"dgemm_gflops"`
}

// runGemmWorker is the worker mode that measures the build's gemm rates alone, as the reference of a
// row whose subject is a whole build (scale-gptq).
func runGemmWorker(w io.Writer) error {
	sg, dg := gemmRates()
	return json.NewEncoder(w).Encode(gemmResult{Backend: quant.BLASBackend, SgemmGFLOP: sg, DgemmGFLOP: dg})
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
		if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.DgemmGFLOP <= 0 {
			return 0, 0, fmt.Errorf("gemm worker output %q: %v", out.String(), err)
		}
		return time.Duration(matmulFlops() / res.DgemmGFLOP / 1e9 * float64(time.Second)), 0, nil
	}}
}

// matmulFlops is the flop count of the reference matmul (2·d³).
func matmulFlops() float64 { return 2 * float64(matmulDim) * matmulDim * matmulDim }

// gptqShares fills the GPTQ rate and share of a scale-gptq row once its medians are known: each
// build's GPTQ flops (layers × layerGPTQFlops) at the dgemm rate of the reference measure, over the
// build's median wall time; and, with a fit over two or more sizes, the same per layer against the
// fitted seconds per layer (the row's Note says so).
func gptqShares(r *Row, s shape) {
	r.finish()
	ref := r.measure(dgemmLabel)
	if ref == nil || ref.Skipped != "" || ref.Stats.Median <= 0 {
		return
	}
	dgemm := matmulFlops() / ref.Stats.Median / 1e9
	ref.GFLOPS = dgemm
	per := layerGPTQFlops(s)
	for i := range r.Measures {
		m := &r.Measures[i]
		if m.Role != "subject" || m.Skipped != "" || m.Stats.Median <= 0 || m.X <= 0 {
			continue
		}
		flops := per * m.X
		m.GFLOPS = flops / m.Stats.Median / 1e9
		m.Share = m.GFLOPS / dgemm
		m.Extra = fmt.Sprintf("GPTQ %.3g flops, %.1f GFLOP/s over the whole build = %.0f%% of the dgemm rate", flops, m.GFLOPS, 100*m.Share)
	}
	if r.Fit != nil && r.Fit.Slope > 0 {
		layer := per / r.Fit.Slope / 1e9
		r.Note += fmt.Sprintf("; per layer (fit slope %.1f s): GPTQ %.3g flops at %.1f GFLOP/s = **%.0f%% of the dgemm rate** (%.1f GFLOP/s, same run)",
			r.Fit.Slope, per, layer, 100*layer/dgemm, dgemm)
	}
}

// dgemmLabel is the scale-gptq row's reference measure.
const dgemmLabel = "dgemm 2048³ (the build's BLAS)"

// gptqLayerShare is a scale-gptq row's GPTQ share of the dgemm rate per layer: from the fitted
// seconds per layer when two or more sizes were measured, else from the one-layer build.
func gptqLayerShare(r *Row) (float64, bool) {
	if r == nil {
		return 0, false
	}
	ref := r.measure(dgemmLabel)
	if ref == nil || ref.GFLOPS <= 0 {
		return 0, false
	}
	if r.Fit != nil && r.Fit.Slope > 0 {
		return layerGPTQFlops(shape27B(1)) / r.Fit.Slope / 1e9 / ref.GFLOPS, true
	}
	for _, m := range r.Measures {
		if m.Role == "subject" && m.X == 1 && m.Share > 0 {
			return m.Share, true
		}
	}
	return 0, false
}
