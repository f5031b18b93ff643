package build_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/fixtures"
	"orkpipe/internal/testfiles"
	"orkpipe/ork/calib"
	"orkpipe/ork/gguf"
	"orkpipe/ork/pack"
)

// storiesHessians captures stories260K's imatrix entries and full Hessians on 8 sequences of 128 tokens
// of the calibration text.
func storiesHessians(t *testing.T) ([]*calib.ImatrixEntry, map[string]*calib.Hessian) {
	return fixtures.Imatrix(t, testfiles.Path(t, "stories260K.gguf"), testfiles.Path(t, "stories-calib.txt"), 8, 128)
}

func writeImatrix(t *testing.T, dir string, es []*calib.ImatrixEntry, legacy bool) string {
	return fixtures.WriteImatrix(t, dir, "stories", es, legacy, "stories-calib.txt", 8)
}

// imatrixRecipe packs every block weight of stories260K with RTN I4 group 32; the first scheme
// (attention q/k/v and ffn gate/up/down) is the one an imatrix may weight, attn_output stays plain.
const imatrixRecipe = `name: stories-im
source:
  model: %s
imatrix: %s
schemes:
  - match: 'blk\.\d+\.(attn_q|attn_k|attn_v|ffn_gate|ffn_up|ffn_down)\.weight'
    method: rtn
    dtype: I4
    group: 32
    importance: %s
  - match: 'blk\.\d+\.attn_output\.weight'
    method: rtn
    dtype: I4
    group: 32
`

func writeImatrixRecipe(t *testing.T, dir, imatrix, importance string) string {
	t.Helper()
	p := filepath.Join(dir, "stories-im.yaml")
	body := fmt.Sprintf(imatrixRecipe, testfiles.Path(t, "stories260K.gguf"), imatrix, importance)
	if importance == "none" {
		body = strings.Replace(body, "imatrix: "+imatrix+"\n", "", 1)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// entryWeights returns, for each named pack entry, its source rows (a whole 2-D tensor, or expert e's
// rows of a 3-D tensor for "<name>#<e>") and the pack's dequantized entry, both N x K row-major, and K.
func entryWeights(t *testing.T, packPath, modelPath string, names []string, f func(name string, x, q []float32, k int)) {
	t.Helper()
	ctx := context.Background()
	src, err := gguf.Open(ctx, modelPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r, err := pack.Open(ctx, packPath)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, name := range names {
		w, err := r.Load(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		base, e, _ := pack.SplitExpert(name)
		ti, err := src.Tensor(base)
		if err != nil {
			t.Fatal(err)
		}
		k, n := int(ti.Shape[0]), int(ti.Shape[1])
		x := make([]float32, n*k)
		if err := src.ReadRows(ctx, ti, int64(e*n), x); err != nil {
			t.Fatal(err)
		}
		f(name, x, w.Dequantize(), k)
	}
}

// diagErrors returns, per imatrix entry (a 2-D weight), sqrt(Σ d_k (W-Q)² / Σ d_k W²) of the pack's
// dequantized entry against the source weight, d = the imatrix mean x² of the weight (diag(H)).
func diagErrors(t *testing.T, packPath, modelPath string, es []*calib.ImatrixEntry) map[string]float64 {
	out := map[string]float64{}
	means := map[string][]float64{}
	var names []string
	for _, e := range es {
		names = append(names, e.Name)
		means[e.Name] = e.Mean(0)
	}
	entryWeights(t, packPath, modelPath, names, func(name string, x, q []float32, k int) {
		d := means[name]
		var num, den float64
		for i, v := range x {
			num += d[i%k] * float64(v-q[i]) * float64(v-q[i])
			den += d[i%k] * float64(v) * float64(v)
		}
		out[name] = math.Sqrt(num / den)
	})
	return out
}

// hessianErrors returns, per entry of full (a 2-D weight or an expert slice "<name>#<e>"), the
// full-Hessian-weighted relative error sqrt(Σ_n e_nᵀ H e_n / Σ_n w_nᵀ H w_n) (e = W - Q: the output
// error over the calibration activations) of the pack's decoded entry against its source rows.
func hessianErrors(t *testing.T, packPath, modelPath string, full map[string]*calib.Hessian) map[string]float64 {
	out := map[string]float64{}
	var names []string
	for name := range full {
		names = append(names, name)
	}
	entryWeights(t, packPath, modelPath, names, func(name string, x, q []float32, k int) {
		h := full[name]
		var num, den float64
		for n := 0; n < len(x)/k; n++ {
			for i := 0; i < k; i++ {
				ei, wi := float64(x[n*k+i]-q[n*k+i]), float64(x[n*k+i])
				for j := 0; j < k; j++ {
					hij := h.Data[i*k+j]
					num += ei * hij * float64(x[n*k+j]-q[n*k+j])
					den += wi * hij * float64(x[n*k+j])
				}
			}
		}
		out[name] = math.Sqrt(num / den)
	})
	return out
}

// TestImatrixBuild: a build of stories260K whose RTN weights are weighted by an imatrix (captured
// from the model on the calibration text, written in the GGUF form, then the legacy form) has a
// lower Hessian-weighted error than plain RTN for most weights; the two forms give the same pack;
// changing the imatrix re-runs exactly the finalize and tile nodes that bind it and what follows.
func TestImatrixBuild(t *testing.T) {
	es, full := storiesHessians(t)
	dir := t.TempDir()
	ggufIm := writeImatrix(t, dir, es, false)
	legacyIm := writeImatrix(t, dir, es, true)
	r := newRig(t)

	plainOut := filepath.Join(t.TempDir(), "out")
	if _, _, err := r.build(t, writeImatrixRecipe(t, t.TempDir(), ggufIm, "none"), plainOut); err != nil {
		t.Fatal(err)
	}
	imDir := t.TempDir()
	path := writeImatrixRecipe(t, imDir, ggufIm, "imatrix")
	imOut := filepath.Join(t.TempDir(), "out")
	ran, _, err := r.build(t, path, imOut)
	if err != nil {
		t.Fatal(err)
	}
	var firstFinal []string
	for _, id := range ran {
		if strings.HasPrefix(id, "rtn-tile:") {
			firstFinal = append(firstFinal, id)
		}
	}
	// attn_output is plain RTN in both builds: cached from the plain build.
	if len(firstFinal) != 5*6 {
		t.Errorf("imatrix build ran %d rtn-tile nodes, want the 30 that bind the imatrix: %v", len(firstFinal), firstFinal)
	}

	model := testfiles.Path(t, "stories260K.gguf")
	plainPack, imPack := filepath.Join(plainOut, "stories-im.orkpack"), filepath.Join(imOut, "stories-im.orkpack")
	plain, plainH := diagErrors(t, plainPack, model, es), hessianErrors(t, plainPack, model, full)
	weighted, weightedH := diagErrors(t, imPack, model, es), hessianErrors(t, imPack, model, full)
	better, betterH, n := 0, 0, 0
	var sumRatio, sumRatioH float64
	for _, e := range es {
		if strings.Contains(e.Name, "attn_output") {
			if plain[e.Name] != weighted[e.Name] {
				t.Errorf("%s (importance none) differs between the builds", e.Name)
			}
			continue
		}
		n++
		ratio := weighted[e.Name] / plain[e.Name]
		sumRatio += ratio
		if weighted[e.Name] < plain[e.Name] {
			better++
		}
		ratioH := weightedH[e.Name] / plainH[e.Name]
		sumRatioH += ratioH
		if weightedH[e.Name] < plainH[e.Name] {
			betterH++
		}
		t.Logf("%-24s diag(H)-weighted error: plain RTN %.5f, imatrix RTN %.5f (ratio %.3f); full-H: %.5f, %.5f (ratio %.3f)",
			e.Name, plain[e.Name], weighted[e.Name], ratio, plainH[e.Name], weightedH[e.Name], ratioH)
	}
	t.Logf("imatrix RTN lower on %d of %d weights in diag(H)-weighted error (mean ratio %.3f), on %d of %d in full-H-weighted error (mean ratio %.3f)",
		better, n, sumRatio/float64(n), betterH, n, sumRatioH/float64(n))
	if better*4 < n*3 || betterH*2 <= n {
		t.Errorf("imatrix RTN is lower on only %d of %d weights (diag(H)), %d of %d (full H)", better, n, betterH, n)
	}
	for _, w := range readReport(t, imOut).Weights {
		if want, ok := weighted[w.Name]; ok && !strings.Contains(w.Name, "attn_output") && math.Abs(w.QErr-want) > 1e-4*want {
			t.Errorf("%s: report qerr %.6f, the Hessian-weighted error of the decoded entry is %.6f", w.Name, w.QErr, want)
		}
	}

	// Same imatrix, legacy form: the file differs, so every node binding it re-runs, and the pack is
	// the same (the means agree to float32 precision of the stored values).
	legacyOut := filepath.Join(t.TempDir(), "out")
	if _, _, err := r.build(t, path, legacyOut, "imatrix="+legacyIm); err != nil {
		t.Fatal(err)
	}
	lw := diagErrors(t, filepath.Join(legacyOut, "stories-im.orkpack"), model, es)
	for name, v := range weighted {
		if math.Abs(lw[name]-v) > 1e-3*v {
			t.Errorf("%s: legacy-form imatrix gives weighted error %.6f, GGUF form %.6f", name, lw[name], v)
		}
	}

	// A second build executes nothing.
	if ran, _, err := r.build(t, path, imOut); err != nil || len(ran) != 0 {
		t.Fatalf("second build executed %v (err %v)", ran, err)
	}

	// Change the imatrix (blk.0.attn_q's importance only, but the file is one input): every node that
	// binds it re-runs (each RTN weight's rtn-tile node: finalize and tile in one), with what follows;
	// plain-RTN weights and nothing else do not.
	es[0].Sum2[0][3] *= 50
	changed := writeImatrix(t, t.TempDir(), es, false)
	ran, _, err = r.build(t, path, filepath.Join(t.TempDir(), "out"), "imatrix="+changed)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for l := 0; l < 5; l++ {
		for _, w := range []string{"attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up", "ffn_down"} {
			name := fmt.Sprintf("blk.%d.%s.weight", l, w)
			want = append(want, "rtn-tile:"+name)
		}
	}
	want = sorted(append(want, "write-orkpack", "sha256:stories-im.orkpack", "verify-local", "report", "provenance")...)
	if strings.Join(ran, " ") != strings.Join(want, " ") {
		t.Errorf("imatrix change re-ran\n  %v\nwant\n  %v", ran, want)
	}
}
