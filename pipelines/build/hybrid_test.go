package build_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/recipe"
)

// hybridWeights lists the pack entries a recipe packing every matmul weight must produce for a model:
// every weight of every captured site of every block, one entry per expert slice of an expert site.
func hybridWeights(t *testing.T, path string) ([]string, model.Config) {
	t.Helper()
	f, err := gguf.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := model.ConfigFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for l := 0; l < cfg.NLayer; l++ {
		for _, s := range cfg.Sites(l) {
			if !calib.Captured(s) {
				continue
			}
			for _, w := range s.Weights {
				name := s.Tensor(l, w)
				if s.Experts == 0 {
					names = append(names, name)
				}
				for e := range s.Experts {
					names = append(names, pack.ExpertName(name, e))
				}
			}
		}
	}
	slices.Sort(names)
	return names, cfg
}

// buildSmall builds the recipe on the model at path into out, calibrated on 4 x 64 tokens of the demo's
// corpus in one-layer windows and screened at ctx 64 on tinystories_sample.txt, and returns the nodes
// it ran and the result.
func buildSmall(t *testing.T, r *rig, recipe, path, out string) ([]string, *engine.Result) {
	t.Helper()
	ran, res, err := r.build(t, recipe, out, "source.model="+path,
		"calibration.corpus="+abs(t, "../recipes/demo-stories-calib.txt"), "calibration.sequences=4", "calibration.ctx=64",
		"calibration.window=1", "screen.text="+testfiles.Path(t, "tinystories_sample.txt"), "screen.ctx=64")
	if err != nil {
		t.Fatal(err)
	}
	return ran, res
}

// TestHybridBuild builds the built-in W4A8 windowed-GPTQ recipe (sequential calibration, one layer per
// window) on each hybrid fixture: every matmul weight is packed I4_ROT_A8 (lfm2moe's routed experts as
// <name>#<e> entries, each GPTQ'd against its own expert's Hessian), the screen and verify-local nodes
// run, and the stub holds every owned tensor as a hole and every other one as data.
func TestHybridBuild(t *testing.T) {
	for _, fixture := range []string{"tiny-qwen35.gguf", "tiny-lfm2moe.gguf"} {
		t.Run(fixture, func(t *testing.T) {
			path := testfiles.Path(t, fixture)
			want, cfg := hybridWeights(t, path)
			r := newRig(t)
			out := filepath.Join(t.TempDir(), "out")
			ran, _ := buildSmall(t, r, "../recipes/w4a8-gptq-g32-rot.yaml", path, out)
			rep := readReport(t, out)
			var got []string
			for _, w := range rep.Weights {
				got = append(got, w.Name)
				if w.DType != "I4_ROT_A8" {
					t.Errorf("%s: dtype %s, want I4_ROT_A8", w.Name, w.DType)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("packed %d entries %v,\nwant every matmul weight (%d) %v", len(got), got, len(want), want)
			}
			var calibrate, propagate, finalize int
			for _, id := range ran {
				switch {
				case strings.HasPrefix(id, "calibrate["):
					calibrate++
				case strings.HasPrefix(id, "propagate["):
					propagate++
				case strings.HasPrefix(id, "finalize:"):
					finalize++
				}
			}
			if calibrate != cfg.NLayer || propagate != cfg.NLayer-1 || finalize != len(want) {
				t.Errorf("ran %d calibrate, %d propagate, %d finalize nodes; want %d, %d, %d", calibrate, propagate, finalize, cfg.NLayer, cfg.NLayer-1, len(want))
			}
			if rep.Screen == nil || !slices.Contains(ran, "screen") || !slices.Contains(ran, "verify-local") {
				t.Fatalf("screen %+v; ran %v", rep.Screen, ran)
			}
			pk, err := pack.Open(context.Background(), filepath.Join(out, "w4a8-gptq-g32-rot.orkpack")) // named after the recipe
			if err != nil {
				t.Fatal(err)
			}
			defer pk.Close()
			owned := pack.OwnedTensors(pk.Entries())
			sr, err := gguf.VerifyStub(context.Background(), filepath.Join(out, "w4a8-gptq-g32-rot.orkpack.gguf"), gguf.NewNameSet(owned...))
			if err != nil {
				t.Fatal(err)
			}
			if sr.Owned != len(owned) || rep.Verify.StubOwned != len(owned) || rep.Verify.PackEntries != len(want) {
				t.Errorf("stub: %d owned holes (verify-local %d), pack entries %d; want %d owned tensors, %d entries", sr.Owned, rep.Verify.StubOwned, rep.Verify.PackEntries, len(owned), len(want))
			}
			t.Logf("%s: %d entries (%d tensors owned), screen %+v; stub %d tensors", fixture, len(want), len(owned), *rep.Screen, sr.Tensors)
		})
	}
}

// TestHybridRefusesNonMatmul: a scheme matching a block tensor that is not a matmul weight (qwen35's
// convolution kernel ssm_conv1d, lfm2's shortconv.conv) is a plan error naming it; nothing runs.
func TestHybridRefusesNonMatmul(t *testing.T) {
	for _, c := range []struct{ fixture, match, tensor string }{
		{"tiny-qwen35.gguf", `blk\.\d+\.(ssm_conv1d|ssm_out)\.weight`, "blk.0.ssm_conv1d.weight"},
		{"tiny-lfm2moe.gguf", `blk\.\d+\.shortconv\.\w+\.weight`, "blk.0.shortconv.conv.weight"},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "r.yaml")
			body := "name: r\nsource:\n  model: " + testfiles.Path(t, c.fixture) + "\nschemes:\n  - match: '" + c.match + "'\n    method: rtn\n    dtype: I8\n"
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			err := planErr(t, p)
			if !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), c.tensor) || !strings.Contains(err.Error(), "not a matmul weight") {
				t.Errorf("plan error %v, want ErrPlan naming %s as not a matmul weight", err, c.tensor)
			}
		})
	}
}

// TestLFM2MoERecipeBuild builds the seed MoE model's recipe (pipelines/recipes/lfm2moe.yaml) on the
// lfm2moe fixture in sequential one-layer windows: every routed expert slice is packed I8 by RTN with
// a scale a row and every other matmul weight I4_ROT_A8 in 32-wide groups; calibration keeps no
// Hessian for the experts (TestCalibrationSkipsUnreadHessians) and each propagate node emulates the
// window's mixed dtypes; the pack carries a residency plan the board profile accepts.
func TestLFM2MoERecipeBuild(t *testing.T) {
	path := testfiles.Path(t, "tiny-lfm2moe.gguf")
	want, cfg := hybridWeights(t, path)
	r := newRig(t)
	out := filepath.Join(t.TempDir(), "out")
	ran, res := buildSmall(t, r, "../recipes/lfm2moe.yaml", path, out)
	rep := readReport(t, out)
	var got []string
	for _, w := range rep.Weights {
		got = append(got, w.Name)
		if _, _, expert := pack.SplitExpert(w.Name); expert {
			if w.DType != "I8" || w.Group != 0 {
				t.Errorf("expert slice %s: %s group %d, want I8 with a scale a row", w.Name, w.DType, w.Group)
			}
		} else if w.DType != "I4_ROT_A8" || w.Group != 32 {
			t.Errorf("%s: %s group %d, want I4_ROT_A8 in 32-wide groups", w.Name, w.DType, w.Group)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("packed %d entries %v,\nwant every matmul weight (%d) %v", len(got), got, len(want), want)
	}
	propagate := 0
	for _, id := range ran {
		if strings.HasPrefix(id, "propagate[") {
			propagate++
		}
	}
	if propagate != cfg.NLayer-1 || res.Failed != 0 {
		t.Errorf("ran %d propagate nodes (%d nodes failed), want %d", propagate, res.Failed, cfg.NLayer-1)
	}
	if rep.Residency == nil || rep.Residency.Hot < 1 || rep.Screen == nil {
		t.Fatalf("residency %+v, screen %+v: want a plan with hot experts and a screen", rep.Residency, rep.Screen)
	}
	pk, err := pack.Open(context.Background(), filepath.Join(out, "lfm2moe.orkpack"))
	if err != nil {
		t.Fatal(err)
	}
	defer pk.Close()
	plan, ok := pk.Residency()
	if !ok {
		t.Fatal("the pack has no residency section")
	}
	if err := board.CheckResidency(plan, pk.Entries(), board.RK3588()); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries; residency %d of %d experts hot, hit rate %.4f; screen PPL ratio %.4f, mean KLD %.4f (a random-weight fixture)",
		len(got), rep.Residency.Hot, rep.Residency.Experts, rep.Residency.HitRate, rep.Screen.PPLRatio, rep.Screen.KLDMean)
}

// TestWeightsOverMemory: a --mem too small for the weight nodes is a plan error that names the largest
// needs (three of them, not every weight: a 27B model short of memory has hundreds), counts the rest and
// says the least --mem that plans them.
func TestWeightsOverMemory(t *testing.T) {
	path := testfiles.Path(t, "tiny-lfm2moe.gguf")
	r, err := recipe.Load("../recipes/lfm2moe.yaml", "source.model="+path, "calibration.corpus="+abs(t, "../recipes/demo-stories-calib.txt"),
		"calibration.sequences=4", "calibration.ctx=64", "screen.text="+testfiles.Path(t, "tinystories_sample.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := build.New(r, build.WithMemoryBudget(100<<20))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tg.Graph(context.Background())
	// 22 GPTQ weights (the dense and attention ones), each over 100 MiB; the 96 RTN expert slices fit.
	if !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), "22 weight nodes need more than --mem 100.00 MiB: weight blk.0.ffn_down.weight") ||
		strings.Count(err.Error(), "to finalize") != 3 || !strings.Contains(err.Error(), "and 19 more") {
		t.Fatalf("plan at --mem 100 MiB: %v", err)
	}
	largest := regexp.MustCompile(`needs (\S+ \S+) to finalize`).FindStringSubmatch(err.Error())
	if largest == nil || !strings.HasSuffix(err.Error(), "the plan needs --mem "+largest[1]+" at least") {
		t.Errorf("plan at --mem 100 MiB: %v; want it to end with the largest need as the --mem that plans", err)
	}
}
