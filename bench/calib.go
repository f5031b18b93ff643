package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/ork/quant"
	"orkpipe/stages"
)

// calibResult is what `bench -worker calib` prints: one calibrate node of a generated 27B-shaped
// layer, timed, with its flop count and the build's own sgemm and dgemm rates measured in the same
// process.
type calibResult struct {
	Backend    string  `json:"backend"`
	Embd       int     `json:"n_embd"`
	FF         int     `json:"n_ff"`
	Sequences  int     `json:"sequences"`
	Ctx        int     `json:"ctx"`
	Seconds    float64 `json:"calibrate_s"`
	CPUSeconds float64 `json:"calibrate_cpu_s"` // user + system CPU of the process during the node
	FwdFlops   float64 `json:"forward_flops"`
	HessFlops  float64 `json:"hessian_flops"`
	SgemmGFLOP float64 `json:"sgemm_gflops"`
	DgemmGFLOP float64 `json:"dgemm_gflops"`
	// The same per CPU-second (user + system of the process, BLAS threads included).
	SgemmCPUGFLOP float64 `json:"sgemm_cpu_gflops"`
	DgemmCPUGFLOP float64 `json:"dgemm_cpu_gflops"`
}

// calibFlops counts a calibrate node's work as docs/performance.md does, for one llama block of widths
// e (n_embd), q (heads·head_dim), kv, f (n_ff) over nSeq sequences of t tokens: the forward pass's
// matrix products, 2·T·N·K per weight, plus attention's two products per head (2·T²·head_dim each,
// counted whole, not causal-halved); and the Hessians' upper triangles, T·K·(K+1) per distinct input.
func calibFlops(e, q, kv, f, nSeq, t int) (fwd, hess float64) {
	rows := float64(nSeq * t)
	nk := float64(q*e + 2*kv*e + e*q + 3*f*e)
	fwd = 2*rows*nk + float64(nSeq)*4*float64(t)*float64(t)*float64(q)
	for _, k := range []int{e, q, e, f} {
		hess += rows * float64(k) * float64(k+1)
	}
	return fwd, hess
}

// gemmRates times one 2048³ float32 matrix product through model.MatMulNT, which is what the calibrate
// stage's forward products call in this build (the pure-Go sgemm kernels or OpenBLAS), and the float64
// rate of its Hessians: under -tags blas one 2048³ product through blas64 (OpenBLAS's dgemm: the
// Hessian tiles are its dsyrk and dgemm calls), in the pure-Go build the Hessian update itself
// (calib.AddGram of 2048 tokens into a 2048-wide triangle, counted as T·K·(K+1) flops as the row counts
// the stage's). It returns their GFLOP/s, per second of wall time and per CPU-second, each the best of 2.
func gemmRates() (sgemm, dgemm, sgemmCPU, dgemmCPU float64) {
	const d = matmulDim
	a32, c32 := make([]float32, d*d), make([]float32, d*d)
	a64, c64 := make([]float64, d*d), make([]float64, d*d)
	for i := range a32 {
		a32[i] = float32((i*31)%101)/101 - 0.5
		a64[i] = float64(a32[i])
	}
	m64 := blas64.General{Rows: d, Cols: d, Stride: d, Data: a64}
	o64 := blas64.General{Rows: d, Cols: d, Stride: d, Data: c64}
	best := func(flops float64, f func()) (wall, cpu float64) {
		var b, c time.Duration
		for i := 0; i < 2; i++ {
			c0, start := processCPU(), time.Now()
			f()
			el, ce := time.Since(start), processCPU()-c0
			if i == 0 || el < b {
				b = el
			}
			if i == 0 || ce < c {
				c = ce
			}
		}
		return flops / b.Seconds() / 1e9, flops / c.Seconds() / 1e9
	}
	sgemm, sgemmCPU = best(2*float64(d)*d*d, func() { model.MatMulNT(c32, a32, a32, d, d, d) })
	if quant.BLASBackend == "gonum" {
		dgemm, dgemmCPU = best(float64(d)*d*(d+1), func() { calib.AddGram(c64, d, a64, d) })
	} else {
		dgemm, dgemmCPU = best(2*float64(d)*d*d, func() { blas64.Gemm(blas.Trans, blas.NoTrans, 1, m64, m64, 0, o64) })
	}
	return sgemm, dgemm, sgemmCPU, dgemmCPU
}

// runCalibWorker is the worker mode: it generates a one-layer Q8_0 model of widths embd/ff (synth
// stage), tokenizes nSeq sequences of ctx tokens of corpus, measures the gemm rates, runs one calibrate
// node [0, 1) with hidden states (as the first window of a one-shot build) and writes a calibResult as
// JSON to w. With cpuProfile set, the calibrate node runs under a CPU profile written there.
func runCalibWorker(ctx context.Context, w io.Writer, embd, ff, nSeq, ctxLen int, corpus, cpuProfile string) error {
	dir, err := os.MkdirTemp("", "orkpipe-bench-calib-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	exec := func(stage string, params any, inputs map[string]string) (map[string]string, error) {
		k, err := stages.Lookup(stage)
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(params)
		if err != nil {
			return nil, err
		}
		b, err := k.Bind(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", stage, err)
		}
		out, err := os.MkdirTemp(dir, stage+"-")
		if err != nil {
			return nil, err
		}
		req := stages.Request{Inputs: map[string]stages.File{}, OutDir: out}
		for name, p := range inputs {
			req.Inputs[name] = stages.File{Path: p}
		}
		if err := b.Run(ctx, req); err != nil {
			return nil, fmt.Errorf("%s: %w", stage, err)
		}
		res := map[string]string{}
		for _, o := range b.Spec().Outputs {
			res[o] = filepath.Join(out, o)
		}
		return res, nil
	}
	heads, kv := embd/128, max(1, embd/640)
	sp := stages.SynthParams{Layers: 1, Embd: embd, FF: ff, Heads: heads, HeadsKV: kv, Vocab: 512, Ctx: max(256, ctxLen), Type: "Q8_0", Seed: 1}
	mo, err := exec("synth", sp, nil)
	if err != nil {
		return err
	}
	tok, err := exec("tokenize", stages.TokenizeParams{Sequences: nSeq, Ctx: ctxLen, CorpusName: filepath.Base(corpus)},
		map[string]string{"model": mo["model.gguf"], "corpus": corpus})
	if err != nil {
		return err
	}
	gf, err := gguf.Open(ctx, mo["model.gguf"])
	if err != nil {
		return err
	}
	cfg, err := model.ConfigFromGGUF(gf)
	gf.Close()
	if err != nil {
		return err
	}
	shape := stages.ShapeOf(cfg)
	runtime.GC()
	sg, dg, sgc, dgc := gemmRates()
	runtime.GC()
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := processCPU()
	start := time.Now()
	if _, err := exec("calibrate", stages.CalibrateParams{Shape: shape, Start: 0, End: 1, Sequences: nSeq, Ctx: ctxLen, Hidden: true},
		map[string]string{"model": mo["model.gguf"], "tokens": tok["tokens"]}); err != nil {
		return err
	}
	el := time.Since(start).Seconds()
	cpu := (processCPU() - cpu0).Seconds()
	c := shape.Config()
	fwd, hess := calibFlops(c.NEmbd, c.QDim(), c.KVDim(), c.NFF, nSeq, ctxLen)
	return json.NewEncoder(w).Encode(calibResult{Backend: quant.BLASBackend, Embd: embd, FF: ff, Sequences: nSeq, Ctx: ctxLen,
		Seconds: el, CPUSeconds: cpu, FwdFlops: fwd, HessFlops: hess, SgemmGFLOP: sg, DgemmGFLOP: dg, SgemmCPUGFLOP: sgc, DgemmCPUGFLOP: dgc})
}

// processCPU returns the user + system CPU time this process has used (its OpenBLAS threads included).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// calibShare is the calibrate node's rate as a fraction of what the build's own kernels would reach on
// its work: the time its forward flops take at the sgemm rate plus its Hessian flops at the dgemm rate,
// over the measured time.
func calibShare(fwd, hess, sgemm, dgemm, seconds float64) float64 {
	if sgemm <= 0 || dgemm <= 0 || seconds <= 0 {
		return 0
	}
	return (fwd/(sgemm*1e9) + hess/(dgemm*1e9)) / seconds
}

// calibCase is one worker configuration of the calib row: a build and a calibration shape.
type calibCase struct {
	build, bin, skip string
	seqs, ctx        int
	suffix           string // appended to the measures' labels ("" for the 4 x 128 shape)
}

// Labels of the calib row's -tags blas subjects, which the targets judge.
const (
	calibBLASLabel      = "calibrate, -tags blas"
	calibBLASDenseLabel = "calibrate, -tags blas, 8 x 128 (dense Hessians)"
)

// rowCalib: one calibrate node of a 27B-shaped layer in worker processes, each of which also measures
// its build's sgemm and dgemm rates; the subject's share is of those rates, from the same process.
// The shape, 4 sequences of 128 tokens, is one batch of calib.BatchRows rows: every Hessian's
// only update is multiplied while its file is encoded, and no K x K matrix is allocated (the deferred
// path). Real recipes calibrate on more tokens (32 x 512), where every Hessian is allocated and updated
// batch by batch: the row also runs 8 x 128 tokens (two batches) in the -tags blas build, the dense
// path the recipes take. The pure-Go build runs the shape unless -calib-pure-go=false.
func rowCalib(e *env) (Row, error) {
	const embd, ff = 5120, 17408
	cases := []calibCase{
		{build: "-tags blas", bin: e.blasSelf, skip: e.blasErr, seqs: 4, ctx: 128},
		{build: "-tags blas", bin: e.blasSelf, skip: e.blasErr, seqs: 8, ctx: 128, suffix: ", 8 x 128 (dense Hessians)"},
		{build: "pure Go", bin: e.self, seqs: 4, ctx: 128},
	}
	if !e.calibPureGo {
		cases[2].skip = "-calib-pure-go=false"
	}
	fwd, hess := calibFlops(embd, embd, embd/5, ff, 4, 128)
	r := Row{ID: "calib", Title: fmt.Sprintf("calibrate one 27B-shaped layer (n_embd %d, n_ff %d, Q8_0), 4 x 128 tokens (and 8 x 128)", embd, ff),
		Note: fmt.Sprintf("stage calibrate [0, 1) with hidden states, in a worker process (`go run ./bench -worker calib`); flops at 4 x 128 = forward %.3g (2·T·N·K per weight + attention) + Hessians %.3g (T·K·(K+1) per input site), twice that at 8 x 128; 4 x 128 tokens are one batch of rows (each Hessian's update multiplied while its file is encoded), 8 x 128 two (every Hessian allocated and updated: the path of recipes' 32 x 512); share = (forward flops at the sgemm rate + Hessian flops at the dgemm rate) / measured time; sgemm: model.MatMulNT %d³; dgemm: OpenBLAS's dgemm 2048³ under -tags blas, the Hessian update itself in the pure-Go build (calib.AddGram, 2048 tokens into a 2048-wide triangle; gonum's dgemm only where it has no AVX2 kernel); both in the same process (what the stage calls)",
			fwd, hess, matmulDim)}
	var steps []step
	cpu := make([][]float64, len(cases))      // per case: CPU seconds of the calibrate node, per run
	cpuIdeal := make([][]float64, len(cases)) // per case and run: its flops at the gemms' rates per CPU-second
	for _, c := range cases {
		sg := Measure{Label: "sgemm, " + c.build + c.suffix, Role: "reference"}
		dg := Measure{Label: "dgemm, " + c.build + c.suffix, Role: "reference"}
		cm := Measure{Label: "calibrate, " + c.build + c.suffix, Role: "subject", Command: fmt.Sprintf("bench -worker calib -k %d -n %d -seqs %d -ctx %d", embd, ff, c.seqs, c.ctx)}
		if c.bin == "" || c.skip != "" {
			cm.Skipped = "skipped: " + c.skip
			sg.Skipped, dg.Skipped = cm.Skipped, cm.Skipped
		}
		r.Measures = append(r.Measures, sg, dg, cm)
	}
	for i, c := range cases {
		sg, dg, cm := &r.Measures[3*i], &r.Measures[3*i+1], &r.Measures[3*i+2]
		if cm.Skipped != "" {
			continue
		}
		steps = append(steps, step{m: cm, rss: true, run: func() (time.Duration, int64, error) {
			var out bytes.Buffer
			_, rss, err := e.command(&out, c.bin, "-worker", "calib", "-k", fmt.Sprint(embd), "-n", fmt.Sprint(ff),
				"-seqs", fmt.Sprint(c.seqs), "-ctx", fmt.Sprint(c.ctx), "-corpus", e.corpus)
			if err != nil {
				return 0, 0, err
			}
			var res calibResult
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				return 0, 0, fmt.Errorf("worker output %q: %w", out.String(), err)
			}
			flops := 2 * float64(matmulDim) * matmulDim * matmulDim
			sg.Samples = append(sg.Samples, flops/res.SgemmGFLOP/1e9)
			dg.Samples = append(dg.Samples, flops/res.DgemmGFLOP/1e9)
			cpu[i] = append(cpu[i], res.CPUSeconds)
			if res.SgemmCPUGFLOP > 0 && res.DgemmCPUGFLOP > 0 {
				cpuIdeal[i] = append(cpuIdeal[i], res.FwdFlops/res.SgemmCPUGFLOP/1e9+res.HessFlops/res.DgemmCPUGFLOP/1e9)
			}
			return time.Duration(res.Seconds * float64(time.Second)), rss, nil
		}})
	}
	err := e.interleave(e.longRuns, steps...)
	for i, c := range cases {
		f, h := calibFlops(embd, embd, embd/5, ff, c.seqs, c.ctx)
		calibFinish(&r.Measures[3*i], &r.Measures[3*i+1], &r.Measures[3*i+2], f, h, cpu[i], cpuIdeal[i])
	}
	return r, err
}

// calibFinish sets one case's rates and share from its samples: sg and dg are the worker's sgemm and
// dgemm references, cm the calibrate node of fwd + hess flops; cpu holds the node's CPU seconds per run
// and cpuIdeal its flops at the references' rates per CPU-second.
func calibFinish(sg, dg, cm *Measure, fwd, hess float64, cpu, cpuIdeal []float64) {
	flops := 2 * float64(matmulDim) * matmulDim * matmulDim
	s, d, c := Summarize(sg.Samples).Median, Summarize(dg.Samples).Median, Summarize(cm.Samples).Median
	if s <= 0 || d <= 0 || c <= 0 {
		return
	}
	sg.GFLOPS, dg.GFLOPS, cm.GFLOPS = flops/s/1e9, flops/d/1e9, (fwd+hess)/c/1e9
	cm.Share = calibShare(fwd, hess, sg.GFLOPS, dg.GFLOPS, c)
	cm.Extra = fmt.Sprintf("%.0f%% of the sgemm/dgemm rate", 100*cm.Share)
	cs := Summarize(cpu).Median
	cm.Extra += fmt.Sprintf("; CPU %.1f s (median)", cs)
	if len(cpuIdeal) > 0 && cs > 0 {
		cm.Extra += fmt.Sprintf(", %.0f%% of the sgemm/dgemm rate per CPU-second", 100*Summarize(cpuIdeal).Median/cs)
	}
}
