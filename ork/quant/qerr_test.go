package quant

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
)

// loadMatmulWeights reads the 2-D matmul weights of a GGUF file whose names match re
// (token_embd, an embedding lookup, is not a matmul and is skipped).
func loadMatmulWeights(t testing.TB, path string, re *regexp.Regexp) []Matrix {
	t.Helper()
	ctx := context.Background()
	f, err := gguf.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Matrix
	for _, ti := range f.Tensors {
		if len(ti.Shape) != 2 || ti.Name == "token_embd.weight" || !re.MatchString(ti.Name) {
			continue
		}
		m := Matrix{Name: ti.Name, Rows: int(ti.Rows()), Cols: int(ti.RowLen())}
		m.Data = make([]float32, m.Rows*m.Cols)
		if err := f.ReadRows(ctx, ti, 0, m.Data); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no matmul weights match %v", path, re)
	}
	return out
}

func errTable(ts []TensorError, mean []SchemeError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s", "scheme")
	for _, s := range mean {
		fmt.Fprintf(&b, " %10s", s.Scheme)
	}
	b.WriteString("\n")
	row := func(name string, ss []SchemeError) {
		fmt.Fprintf(&b, "%-22s", name)
		for _, s := range ss {
			fmt.Fprintf(&b, " %10.5f", s.MatmulRelErr)
		}
		b.WriteString("\n")
	}
	for _, t := range ts {
		row(t.Name, t.Schemes)
	}
	row("MEAN matmul", mean)
	fmt.Fprintf(&b, "%-22s", "MEAN weight")
	for _, s := range mean {
		fmt.Fprintf(&b, " %10.5f", s.WeightRelErr)
	}
	b.WriteString("\n")
	return b.String()
}

func schemeMap(ss []SchemeError) map[string]SchemeError {
	m := map[string]SchemeError{}
	for _, s := range ss {
		m[s.Scheme] = s
	}
	return m
}

// checkOrdering asserts the board project's ordering on matmul error, and that rotated G32 W4A8
// with GPTQ is at or below ggml Q4_0.
func checkOrdering(t *testing.T, label string, ss []SchemeError) {
	t.Helper()
	m := schemeMap(ss)
	chain := []string{SchemeW4A4PC, SchemeW4A4G32, SchemeW4A4G32Rot, SchemeW4A8G32Rot}
	for i := 0; i+1 < len(chain); i++ {
		a, b := m[chain[i]].MatmulRelErr, m[chain[i+1]].MatmulRelErr
		if !(a > b) {
			t.Errorf("%s: matmul error %s = %.5f is not above %s = %.5f", label, chain[i], a, chain[i+1], b)
		}
	}
	if g, q := m[SchemeW4A8G32RotGPTQ].MatmulRelErr, m[SchemeQ4_0].MatmulRelErr; !(g <= q) {
		t.Errorf("%s: %s matmul error %.5f is above %s %.5f", label, SchemeW4A8G32RotGPTQ, g, SchemeQ4_0, q)
	}
	if g, r := m[SchemeW4A8G32RotGPTQ].MatmulRelErr, m[SchemeW4A8G32Rot].MatmulRelErr; !(g < r) {
		t.Errorf("%s: GPTQ matmul error %.5f not below RTN's %.5f", label, g, r)
	}
}

func TestEvaluateStories260K(t *testing.T) {
	ws := loadMatmulWeights(t, testfiles.Path(t, "stories260K.gguf"), regexp.MustCompile(`.`))
	ctx := context.Background()
	var ts []TensorError
	for _, w := range ws {
		acts, err := SpikedActivations(512, w.Cols, 1)
		if err != nil {
			t.Fatal(err)
		}
		te, err := EvaluateTensor(ctx, w, acts, EvalConfig{Workers: 2, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, te)
	}
	mean := MeanErrors(ts)
	t.Logf("stories260K, %d weights, 512 spiked tokens, matmul rel err:\n%s", len(ts), errTable(ts, mean))
	checkOrdering(t, "stories260K mean", mean)
}

func TestEvaluate5120Wide(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "GPTQ on K=5120 takes tens of seconds")
	}
	w, err := SyntheticWeight("synthetic.5120", 256, 5120, 7)
	if err != nil {
		t.Fatal(err)
	}
	acts, err := SpikedActivations(512, 5120, 1)
	if err != nil {
		t.Fatal(err)
	}
	te, err := EvaluateTensor(context.Background(), w, acts, EvalConfig{Workers: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ts := []TensorError{te}
	t.Logf("synthetic 256x5120, 512 spiked tokens:\n%s", errTable(ts, MeanErrors(ts)))
	checkOrdering(t, "5120-wide", te.Schemes)
}

// TestEvaluateHeldOut scores GPTQ on activations its Hessian did not see (a second sample of the
// same correlated distribution): it must still beat RTN with the same scheme. (On i.i.d. spiked
// Gaussian activations there is no structure to exploit and a 512-token Hessian only fits
// sampling noise: held out, GPTQ is then worse than RTN, which is why this test uses
// correlated activations.)
func TestEvaluateHeldOut(t *testing.T) {
	ws := loadMatmulWeights(t, testfiles.Path(t, "stories260K.gguf"), regexp.MustCompile(`^blk\.[0-4]\.(attn_output|ffn_down)`))
	var ts []TensorError
	for _, w := range ws {
		acts, err := CorrelatedActivations(512, w.Cols, 1)
		if err != nil {
			t.Fatal(err)
		}
		calib, err := CorrelatedActivations(512, w.Cols, 2)
		if err != nil {
			t.Fatal(err)
		}
		te, err := EvaluateTensor(context.Background(), w, acts, EvalConfig{Workers: 2, Seed: 1, Calib: &calib})
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, te)
	}
	mean := MeanErrors(ts)
	t.Logf("correlated activations, held-out calibration (seed 2), evaluation seed 1:\n%s", errTable(ts, mean))
	m := schemeMap(mean)
	if g, r := m[SchemeW4A8G32RotGPTQ].MatmulRelErr, m[SchemeW4A8G32Rot].MatmulRelErr; !(g < r) {
		t.Errorf("held-out GPTQ %v not below RTN %v", g, r)
	}
}
