package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// buildStep is a measure of `orkpipe build`: fresh cache and output first when cold; a warm
// build must execute no node (else the no-op figure would be a lie) and a cold one at least one.
func (e *env) buildStep(m *Measure, cache, recipe, out string, mem int64, cold bool) step {
	argv := e.buildArgv(cache, recipe, out, mem)
	m.Command, m.Budget = "orkpipe --cache C --mem M --json build RECIPE -o OUT", mem
	if cold {
		m.Command += " (fresh cache and output dir)"
	}
	return step{m: m, rss: true,
		prepare: func() error {
			if !cold {
				return nil
			}
			if err := os.RemoveAll(cache); err != nil {
				return err
			}
			return os.RemoveAll(out)
		},
		run: func() (time.Duration, int64, error) {
			var stdout bytes.Buffer
			d, rss, err := e.command(&stdout, argv...)
			if err != nil {
				return d, rss, err
			}
			m.CPU = append(m.CPU, e.lastCPU.Seconds())
			n, err := executed(stdout.Bytes())
			if err != nil {
				return d, rss, err
			}
			if cold && n == 0 {
				return d, rss, fmt.Errorf("a cold build executed no node")
			}
			if !cold && n != 0 {
				return d, rss, fmt.Errorf("a no-op rebuild executed %d nodes", n)
			}
			return d, rss, nil
		}}
}

// rowRTN: cold RTN pack builds of a generated F16 27B-shaped slice — with the default clip search
// and without one (clip_grid [1.0]) — vs llama.cpp's llama-quantize Q4_0 of the same file (all
// cores) and vs reading the source once.
func rowRTN(e *env, layers int) (Row, error) {
	s := shape27B(layers)
	s.Type = "F16"
	r := Row{ID: "rtn", Title: fmt.Sprintf("RTN pack build, %s (F16 source)", s)}
	src, err := e.source(s)
	if err != nil {
		return r, err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return r, err
	}
	r.Note = fmt.Sprintf("source %s; every matmul weight RTN I4_NATIVE g32; cold = fresh cache (source hashed, every node run); llama-quantize: `llama-quantize SRC OUT Q4_0 %d` (its own choice of types for embeddings and output)",
		formatBytes(fi.Size()), runtime.NumCPU())
	rec, err := e.recipe("rtn27b", src, "rtn")
	if err != nil {
		return r, err
	}
	rec1, err := e.recipe("rtn27b-noclip", src, "rtn", "clip_grid: [1.0]")
	if err != nil {
		return r, err
	}
	r.Measures = []Measure{{Label: "cat source > /dev/null", Role: "baseline", Bytes: fi.Size()},
		{Label: "llama-quantize Q4_0", Role: "baseline", Bytes: fi.Size()},
		{Label: "orkpipe build (cold), clip search", Role: "subject", Bytes: fi.Size(), Versus: "llama-quantize Q4_0"},
		{Label: "orkpipe build (cold), clip_grid [1.0]", Role: "subject", Bytes: fi.Size(), Versus: "llama-quantize Q4_0"}}
	cache, out := filepath.Join(e.dir, "rtn-cache"), filepath.Join(e.dir, "rtn-out")
	lqOut := filepath.Join(e.dir, "rtn-llama-quantize.gguf")
	defer os.RemoveAll(cache)
	defer os.RemoveAll(out)
	defer os.RemoveAll(lqOut)
	steps := []step{e.catStep(&r.Measures[0], src)}
	if e.llamaQuantize == "" {
		r.Measures[1].Skipped = e.llamaQuantizeWhy
	} else {
		st := e.cmdStep(&r.Measures[1], func() error { return os.RemoveAll(lqOut) },
			e.llamaQuantize, src, lqOut, "Q4_0", fmt.Sprint(runtime.NumCPU()))
		st.rss, st.usage = true, true
		steps = append(steps, st)
	}
	clip, noclip := e.buildStep(&r.Measures[2], cache, rec, out, e.mem, true), e.buildStep(&r.Measures[3], cache, rec1, out, e.mem, true)
	clip.usage, noclip.usage = true, true
	steps = append(steps, clip, noclip)
	return r, e.interleave(e.longRuns, steps...)
}

// rowNoop: the no-op rebuild of a 64-layer recipe whose graph is 27B-shaped (448 matmul weights)
// with every width divided by 20, vs its cold build and vs one `stat` of its inputs.
func rowNoop(e *env) (Row, error) {
	s := shapeScaled(64)
	r := Row{ID: "noop", Title: fmt.Sprintf("no-op rebuild, 27B-shaped graph (%s)", s)}
	src, err := e.source(s)
	if err != nil {
		return r, err
	}
	rec, err := e.recipe("noop27b", src, "rtn")
	if err != nil {
		return r, err
	}
	cache, out := filepath.Join(e.dir, "noop-cache"), filepath.Join(e.dir, "noop-out")
	defer os.RemoveAll(cache)
	defer os.RemoveAll(out)
	nodes, err := e.countNodes(filepath.Join(e.dir, "plan-cache"), rec)
	if err != nil {
		return r, err
	}
	os.RemoveAll(filepath.Join(e.dir, "plan-cache"))
	r.Note = fmt.Sprintf("%d nodes, 448 matmul weights as in the 27B (widths /20, so the cold build is far cheaper than a real 27B's: the ratio to cold is conservative); the first rebuild after a cold build hashes the exports once into the stat cache, later ones only stat them", nodes)
	r.Measures = []Measure{
		{Label: "stat source recipe orkpipe", Role: "baseline"},
		{Label: "cold build", Role: "baseline"},
		{Label: "first no-op rebuild", Role: "baseline"},
		{Label: "no-op rebuild", Role: "subject"},
	}
	if _, why := tool("stat"); why != "" {
		r.Measures[0].Skipped = why
	}
	first := e.buildStep(&r.Measures[2], cache, rec, out, e.mem, false)
	first.prepare = pastRacyWindow
	return r, e.interleave(e.runs,
		e.cmdStep(&r.Measures[0], nil, "stat", src, rec, e.orkpipe),
		e.buildStep(&r.Measures[1], cache, rec, out, e.mem, true),
		first,
		e.buildStep(&r.Measures[3], cache, rec, out, e.mem, false))
}

// pastRacyWindow waits (untimed) until files a build just wrote are older than the stat cache's
// racy window (100 ms, artifacts.HashFile): a rebuild started sooner hashes the exports without
// remembering them, so the next one hashes them again. A person's rebuild comes later than that;
// with a no-op rebuild of some 20 ms the bench's did not.
func pastRacyWindow() error {
	time.Sleep(200 * time.Millisecond)
	return nil
}

// rowScaleNoop: no-op rebuild time vs node count (8 to 64 layers of the scaled 27B graph).
func rowScaleNoop(e *env) (Row, error) {
	r := Row{ID: "scale-noop", Title: "scaling: no-op rebuild vs nodes (27B graph, widths /20)", FitUnit: "node"}
	for _, layers := range []int{8, 16, 32, 64} {
		s := shapeScaled(layers)
		src, err := e.source(s)
		if err != nil {
			return r, err
		}
		rec, err := e.recipe(fmt.Sprintf("scale%d", layers), src, "rtn")
		if err != nil {
			return r, err
		}
		cache, out := filepath.Join(e.dir, "sn-cache"), filepath.Join(e.dir, "sn-out")
		nodes, err := e.countNodes(cache, rec)
		if err != nil {
			return r, err
		}
		os.RemoveAll(cache)
		os.RemoveAll(out)
		if _, _, err := e.command(nil, e.buildArgv(cache, rec, out, e.mem)...); err != nil {
			return r, err
		}
		// One untimed rebuild, past the racy window, fills the stat cache with the exports (see the
		// no-op row).
		pastRacyWindow()
		if _, _, err := e.command(nil, e.buildArgv(cache, rec, out, e.mem)...); err != nil {
			return r, err
		}
		r.Measures = append(r.Measures, Measure{Label: fmt.Sprintf("no-op rebuild, %d layers (%d nodes)", layers, nodes), Role: "subject", X: float64(nodes)})
		m := &r.Measures[len(r.Measures)-1]
		if err := e.interleave(e.runs, e.buildStep(m, cache, rec, out, e.mem, false)); err != nil {
			return r, err
		}
		os.RemoveAll(cache)
		os.RemoveAll(out)
	}
	return r, nil // finish fits the medians against X
}

// rowScaleBuild: cold build time of 27B-shaped slices (real widths) with method, vs layers; for GPTQ
// also the share of the dgemm rate (gptqShares), of the sizes measured even when a later one failed.
func rowScaleBuild(e *env, method string, layerSet []int, mem int64) (Row, error) {
	r, err := scaleBuilds(e, method, layerSet, mem)
	if method == "gptq" {
		gptqShares(&r, shape27B(1))
	}
	return r, err
}

func scaleBuilds(e *env, method string, layerSet []int, mem int64) (Row, error) {
	r := Row{ID: "scale-" + method, Title: fmt.Sprintf("scaling: cold %s build vs layers (27B widths)", method), FitUnit: "layer",
		Note:     fmt.Sprintf("%d run(s) per size (-long-runs); fresh cache per run", e.longRuns),
		Measures: make([]Measure, 0, len(layerSet)+1)} // steps hold pointers into Measures: no reallocation
	var gemm []step // gptq: the build's dgemm rate before every build and after the last
	if method == "gptq" {
		r.Note += "; GPTQ flops per weight 4/3·K³ + 2·N·K² (nominal: the factor of H⁻¹ now takes 2/3·K³; 7 weights a layer), their share = those flops at the dgemm rate of the reference measure (median) / the build's wall time"
		r.Measures = append(r.Measures, Measure{Label: dgemmLabel, Role: "reference"})
		gemm = append(gemm, e.gemmStep(&r.Measures[0]))
	}
	for _, layers := range layerSet {
		s := shape27B(layers)
		src, err := e.source(s)
		if err != nil {
			return r, err
		}
		rec, err := e.recipe(fmt.Sprintf("scale-%s-%d", method, layers), src, method)
		if err != nil {
			return r, err
		}
		cache, out := filepath.Join(e.dir, "sb-cache"), filepath.Join(e.dir, "sb-out")
		r.Measures = append(r.Measures, Measure{Label: fmt.Sprintf("cold %s build, %d layer(s)", method, layers), Role: "subject", X: float64(layers)})
		m := &r.Measures[len(r.Measures)-1]
		err = e.interleave(e.longRuns, append(gemm, e.buildStep(m, cache, rec, out, mem, true))...)
		os.RemoveAll(cache)
		os.RemoveAll(out)
		if err != nil {
			return r, err // finish still fits the sizes measured before the error
		}
	}
	return r, e.interleave(1, gemm...) // finish fits the medians against X
}

// rowRSS: the peak RSS of a cold 27B-shaped (2 layers, real widths) windowed GPTQ build under
// each --mem budget; the budget is the baseline the peak must stay under.
func rowRSS(e *env, budgets []int64) (Row, error) {
	s := shape27B(2)
	r := Row{ID: "rss", Title: fmt.Sprintf("peak RSS, windowed GPTQ build, %s", s),
		Note: "every matmul weight GPTQ (calibration window auto); peak RSS from the build process's rusage"}
	src, err := e.source(s)
	if err != nil {
		return r, err
	}
	rec, err := e.recipe("rss27b", src, "gptq")
	if err != nil {
		return r, err
	}
	for _, b := range budgets {
		r.Measures = append(r.Measures, Measure{Label: fmt.Sprintf("cold GPTQ build --mem %s", formatBytes(b)), Role: "subject"})
	}
	for i, b := range budgets {
		cache, out := filepath.Join(e.dir, "rss-cache"), filepath.Join(e.dir, "rss-out")
		err := e.interleave(1, e.buildStep(&r.Measures[i], cache, rec, out, b, true))
		os.RemoveAll(cache)
		os.RemoveAll(out)
		if err != nil {
			return r, err
		}
	}
	return r, nil
}
