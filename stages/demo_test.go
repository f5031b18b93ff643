package stages_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/stages"
)

var update = flag.Bool("update", false, "rewrite testdata/fingerprints.json")

// TestFingerprints runs every demo stage kind on fixed tiny inputs and compares the output
// digests with testdata/fingerprints.json (rewrite with -update). A changed digest means the
// stage's output changed: bump its version (and then update the table).
func TestFingerprints(t *testing.T) {
	ctx := context.Background()
	a, b := writeInput(t, "fixed input A, 32 bytes long....."), writeInput(t, "B")
	cases := []struct {
		name   string
		m      stages.KeyMaterial
		inputs map[string]stages.File
	}{
		{"demo-generate", stages.KeyMaterial{Stage: "demo-generate", Version: 1, Params: []byte(`{"seed":42,"size":100003}`)}, nil},
		{"demo-xor", stages.KeyMaterial{Stage: "demo-xor", Version: 1, Params: []byte(`{"key":90}`)}, map[string]stages.File{"in": a}},
		{"demo-rotate", stages.KeyMaterial{Stage: "demo-rotate", Version: 1, Params: []byte(`{"bits":3}`)}, map[string]stages.File{"in": a}},
		{"demo-join", stages.KeyMaterial{Stage: "demo-join", Version: 1, Params: []byte(`{}`)}, map[string]stages.File{"a": a, "b": b}},
	}
	type fingerprint struct {
		Version int               `json:"version"`
		Outputs map[string]string `json:"outputs"`
	}
	got := map[string]fingerprint{}
	for _, tc := range cases {
		tc.m.Inputs, tc.m.Numerics = map[string]artifacts.Digest{}, ownNumerics(t)
		for n, f := range tc.inputs {
			tc.m.Inputs[n] = f.Digest
		}
		out := t.TempDir()
		names, err := stages.Execute(ctx, tc.m, tc.inputs, nil, out, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		fp := fingerprint{Version: tc.m.Version, Outputs: map[string]string{}}
		for _, n := range names {
			f, err := os.Open(filepath.Join(out, n))
			if err != nil {
				t.Fatal(err)
			}
			d, _, err := artifacts.SumReader(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			fp.Outputs[n] = d.String()
		}
		got[tc.name] = fp
	}
	golden := filepath.Join("testdata", "fingerprints.json")
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	var want map[string]fingerprint
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if got[n].Version != want[n].Version {
			t.Errorf("%s: version %d, table says %d: run with -update to record its new fingerprints", n, got[n].Version, want[n].Version)
			continue
		}
		for out, d := range want[n].Outputs {
			if got[n].Outputs[out] != d {
				t.Errorf("%s output %s: %s, table says %s: the output changed without a version bump", n, out, got[n].Outputs[out], d)
			}
		}
	}
	if len(want) != len(got) {
		t.Errorf("table has %d stages, test ran %d", len(want), len(got))
	}
}
