package quant

import (
	"context"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/ (pure-Go build only)")

type gptqGolden struct {
	Backend string    `json:"backend"`
	QErr    float64   `json:"qerr"`
	TrErr   float64   `json:"tr_err"`
	Codes   []int8    `json:"codes"`
	Scales  []float32 `json:"scales"`
}

// TestBLASMatchesPureGo runs GPTQ (rotated, padded K=300 -> 320, G32) on fixed synthetic data and
// compares with testdata/gptq_golden.json, recorded by the pure-Go build. The pure-Go build must
// match it exactly in codes; the BLAS build (-tags blas) to float tolerance: QErr and the
// Hessian error within 1e-6 relative, scales within 1e-5 relative, and at least 99.5% of the
// codes identical (a value on a rounding boundary may flip by one step).
func TestBLASMatchesPureGo(t *testing.T) {
	ctx := context.Background()
	w := randMatrix("golden.weight", 48, 300, 21)
	acts, err := CorrelatedActivations(600, 300, 5)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHessian(300)
	if err := h.Add(acts.Data, acts.Rows); err != nil {
		t.Fatal(err)
	}
	q, err := GPTQ(ctx, w, h, WithGroup(32), WithRotation(true, 9), WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := HessianError(w, q, h)
	if err != nil {
		t.Fatal(err)
	}
	got := gptqGolden{Backend: BLASBackend, QErr: q.QErr, TrErr: tr, Codes: q.Codes, Scales: q.Scales}
	path := filepath.Join("testdata", "gptq_golden.json")
	if *update {
		if BLASBackend != "gonum" {
			t.Fatal("-update only from the pure-Go build")
		}
		b, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (record it: go test -run BLASMatchesPureGo ./ork/quant -args -update)", err)
	}
	var want gptqGolden
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(want.Codes) != len(got.Codes) || len(want.Scales) != len(got.Scales) {
		t.Fatalf("golden has %d codes %d scales, got %d %d", len(want.Codes), len(want.Scales), len(got.Codes), len(got.Scales))
	}
	relClose := func(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(math.Abs(a), math.Abs(b)) }
	if !relClose(got.QErr, want.QErr, 1e-6) || !relClose(got.TrErr, want.TrErr, 1e-6) {
		t.Errorf("%s: qerr %v tr %v, golden (%s) %v %v", BLASBackend, got.QErr, got.TrErr, want.Backend, want.QErr, want.TrErr)
	}
	for i := range got.Scales {
		if !relClose(float64(got.Scales[i]), float64(want.Scales[i]), 1e-5) {
			t.Errorf("scale %d: %v, golden %v", i, got.Scales[i], want.Scales[i])
			break
		}
	}
	same := 0
	for i := range got.Codes {
		if got.Codes[i] == want.Codes[i] {
			same++
		}
	}
	frac := float64(same) / float64(len(got.Codes))
	if BLASBackend == "gonum" && same != len(got.Codes) {
		t.Errorf("pure-Go build: %d of %d codes differ from the golden file", len(got.Codes)-same, len(got.Codes))
	}
	if frac < 0.995 {
		t.Errorf("%s: only %.4f of the codes match the pure-Go golden file", BLASBackend, frac)
	}
	t.Logf("backend %s: qerr %.9g (golden %.9g), tr %.9g (golden %.9g), codes identical %d/%d",
		BLASBackend, got.QErr, want.QErr, got.TrErr, want.TrErr, same, len(got.Codes))
}
