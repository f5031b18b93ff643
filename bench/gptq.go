package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"time"

	"gonum.org/v1/gonum/mat"

	"orkpipe/ork/quant"
)

// gptqResult is what `bench -worker gptq` prints: one GPTQ of an n x k synthetic weight against a
// Hessian of 512 spiked tokens, and one plain matrix multiply, timed in the same process.
type gptqResult struct {
	Backend      string  `json:"backend"`
	N            int     `json:"n"`
	K            int     `json:"k"`
	GPTQSeconds  float64 `json:"gptq_s"`
	GPTQGFLOPS   float64 `json:"gptq_gflops"`
	MatmulDim    int     `json:"matmul_dim"`
	MatmulSecond float64 `json:"matmul_s"`
	MatmulGFLOPS float64 `json:"matmul_gflops"`
}

// matmulDim is the size of the square baseline multiply (2·d³ flops).
const matmulDim = 2048

// gptqFlops is the nominal flop count of GPTQ on an n x k weight (as ork/quant's benchmark counts
// it): 4/3·k³ for the factor of H⁻¹ as Cholesky of H (k³/3), its inverse (2k³/3) and the Cholesky
// of the inverse (k³/3) — ork/quant now gets the same factor in 2/3·k³, and the count is kept so
// that shares stay comparable across versions — and the column updates (2·n·k²).
func gptqFlops(n, k int) float64 {
	kf := float64(k)
	return 4.0/3*kf*kf*kf + 2*float64(n)*kf*kf
}

// runGPTQWorker is the worker mode: it measures and writes a gptqResult as JSON to w.
func runGPTQWorker(ctx context.Context, w io.Writer, n, k int) error {
	a := mat.NewDense(matmulDim, matmulDim, nil)
	for i := 0; i < matmulDim; i++ {
		for j := 0; j < matmulDim; j++ {
			a.Set(i, j, float64((i*31+j*17)%101)/101-0.5)
		}
	}
	c := mat.NewDense(matmulDim, matmulDim, nil)
	start := time.Now()
	c.Mul(a, a)
	mm := time.Since(start).Seconds()
	a, c = nil, nil
	runtime.GC()

	wt, err := quant.SyntheticWeight(fmt.Sprintf("bench.%dx%d", n, k), n, k, 1)
	if err != nil {
		return err
	}
	acts, err := quant.SpikedActivations(512, k, 2)
	if err != nil {
		return err
	}
	h := quant.NewHessian(k)
	if err := h.Add(acts.Data, acts.Rows); err != nil {
		return err
	}
	acts = quant.Matrix{}
	runtime.GC()
	start = time.Now()
	if _, err := quant.GPTQ(ctx, wt, h, quant.WithBits(4), quant.WithGroup(32), quant.WithWorkers(runtime.GOMAXPROCS(0)), quant.WithConsumeHessian()); err != nil {
		return err
	}
	g := time.Since(start).Seconds()
	res := gptqResult{Backend: quant.BLASBackend, N: n, K: k, GPTQSeconds: g, GPTQGFLOPS: gptqFlops(n, k) / g / 1e9,
		MatmulDim: matmulDim, MatmulSecond: mm, MatmulGFLOPS: 2 * float64(matmulDim) * matmulDim * matmulDim / mm / 1e9}
	return json.NewEncoder(w).Encode(res)
}

// rowGPTQ: GPTQ of an n x k weight in the pure-Go build and the -tags blas build, each against a
// plain matrix multiply's GFLOP/s in the same worker process. Rounds interleave the two builds.
func rowGPTQ(e *env, n, k int) (Row, error) {
	r := Row{ID: fmt.Sprintf("gptq-%d", k), Title: fmt.Sprintf("GPTQ finalize N=%d K=%d (int4 g32)", n, k),
		Note: fmt.Sprintf("library call quant.GPTQ in a worker process (`go run ./bench -worker gptq -n %d -k %d`); flops = 4/3·K³ + 2·N·K²; baseline: gonum Dense.Mul %d³ in the same process", n, k, matmulDim)}
	r.Measures = []Measure{
		{Label: "matmul, pure Go", Role: "reference"}, {Label: "GPTQ, pure Go", Role: "subject"},
		{Label: "matmul, -tags blas", Role: "reference"}, {Label: "GPTQ, -tags blas", Role: "baseline"},
	}
	if e.blasSelf == "" {
		r.Measures[2].Skipped = "skipped: " + e.blasErr
		r.Measures[3].Skipped = r.Measures[2].Skipped
	}
	worker := func(bin string, mm, gq *Measure) step {
		gq.Command = fmt.Sprintf("%s -worker gptq -n %d -k %d", "bench", n, k)
		return step{m: gq, rss: true, run: func() (time.Duration, int64, error) {
			var out bytes.Buffer
			_, rss, err := e.command(&out, bin, "-worker", "gptq", "-n", fmt.Sprint(n), "-k", fmt.Sprint(k))
			if err != nil {
				return 0, 0, err
			}
			var res gptqResult
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				return 0, 0, fmt.Errorf("worker output %q: %w", out.String(), err)
			}
			mm.Samples = append(mm.Samples, res.MatmulSecond)
			mm.GFLOPS = max(mm.GFLOPS, res.MatmulGFLOPS)
			gq.GFLOPS = max(gq.GFLOPS, res.GPTQGFLOPS)
			gq.Extra = fmt.Sprintf("backend %s", res.Backend)
			return time.Duration(res.GPTQSeconds * float64(time.Second)), rss, nil
		}}
	}
	var steps []step
	if e.gptqPureGo {
		steps = append(steps, worker(e.self, &r.Measures[0], &r.Measures[1]))
	} else {
		r.Measures[0].Skipped = "skipped: -gptq-pure-go=false"
		r.Measures[1].Skipped = r.Measures[0].Skipped
	}
	if e.blasSelf != "" {
		steps = append(steps, worker(e.blasSelf, &r.Measures[2], &r.Measures[3]))
	}
	err := e.interleave(e.longRuns, steps...)
	// GFLOP/s from the medians rather than the best run.
	for i, flops := range map[int]float64{0: 2 * float64(matmulDim) * matmulDim * matmulDim, 1: gptqFlops(n, k),
		2: 2 * float64(matmulDim) * matmulDim * matmulDim, 3: gptqFlops(n, k)} {
		if st := Summarize(r.Measures[i].Samples); st.Median > 0 {
			r.Measures[i].GFLOPS = flops / st.Median / 1e9
		}
	}
	for _, p := range [][2]int{{1, 0}, {3, 2}} {
		g, m := &r.Measures[p[0]], r.Measures[p[1]]
		if g.GFLOPS > 0 && m.GFLOPS > 0 {
			g.Extra += fmt.Sprintf("; %.0f%% of the matmul's GFLOP/s", 100*g.GFLOPS/m.GFLOPS)
		}
	}
	return r, err
}
