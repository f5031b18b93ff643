package stages_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/stages"
)

func digestOf(s string) artifacts.Digest { return artifacts.SumBytes([]byte(s)) }

func TestCanonical(t *testing.T) {
	a, b := digestOf("a"), digestOf("b")
	for _, tc := range []struct {
		name string
		m    stages.KeyMaterial
		want string
	}{
		{
			name: "keys sorted at every depth, no whitespace, empty maps as {}",
			m:    stages.KeyMaterial{Stage: "s", Version: 2, Params: json.RawMessage(`{ "z": 1, "a": {"y": [3, 1.5e3], "b": "<&>"} }`)},
			want: `{"inputs":{},"params":{"a":{"b":"<&>","y":[3,1.5e3]},"z":1},"stage":"s","tools":{},"version":2}`,
		},
		{
			name: "inputs and tools sorted by name",
			m: stages.KeyMaterial{Stage: "finalize", Version: 1, Params: json.RawMessage(`{}`),
				Inputs: map[string]artifacts.Digest{"weights": b, "hessian": a}, Tools: map[string]artifacts.Digest{"llama": a}},
			want: `{"inputs":{"hessian":"` + a.String() + `","weights":"` + b.String() + `"},"params":{},"stage":"finalize","tools":{"llama":"` + a.String() + `"},"version":1}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.m.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("canonical\n got %s\nwant %s", got, tc.want)
			}
			key, err := tc.m.Key()
			if err != nil || key != artifacts.SumBytes([]byte(tc.want)) {
				t.Errorf("key %s (%v), want BLAKE3 of the canonical bytes", key, err)
			}
			back, err := stages.DecodeKeyMaterial(got)
			if err != nil {
				t.Fatalf("decoding the canonical form: %v", err)
			}
			again, _ := back.Canonical()
			if string(again) != tc.want {
				t.Errorf("round trip changed the encoding: %s", again)
			}
		})
	}
}

func TestKeyChangesWithEveryField(t *testing.T) {
	base := stages.KeyMaterial{Stage: "s", Version: 1, Params: json.RawMessage(`{"g":32}`),
		Inputs: map[string]artifacts.Digest{"in": digestOf("x")}, Tools: map[string]artifacts.Digest{"t": digestOf("t")}}
	k0, _ := base.Key()
	variants := map[string]func(m *stages.KeyMaterial){
		"stage":   func(m *stages.KeyMaterial) { m.Stage = "s2" },
		"version": func(m *stages.KeyMaterial) { m.Version = 2 },
		"params":  func(m *stages.KeyMaterial) { m.Params = json.RawMessage(`{"g":64}`) },
		"input":   func(m *stages.KeyMaterial) { m.Inputs = map[string]artifacts.Digest{"in": digestOf("y")} },
		"input name": func(m *stages.KeyMaterial) {
			m.Inputs = map[string]artifacts.Digest{"other": digestOf("x")}
		},
		"tool": func(m *stages.KeyMaterial) { m.Tools = map[string]artifacts.Digest{"t": digestOf("u")} },
	}
	for name, mutate := range variants {
		m := base
		mutate(&m)
		if k, _ := m.Key(); k == k0 {
			t.Errorf("changing the %s did not change the key", name)
		}
	}
}

func TestDecodeKeyMaterialRejects(t *testing.T) {
	d := digestOf("a").String()
	for _, tc := range []struct{ name, in, want string }{
		{"unknown field", `{"inputs":{},"params":{},"stage":"s","tools":{},"version":1,"extra":1}`, "unknown field"},
		{"trailing data", `{"inputs":{},"params":{},"stage":"s","tools":{},"version":1} {}`, "trailing"},
		{"empty stage", `{"inputs":{},"params":{},"stage":"","tools":{},"version":1}`, `"stage"`},
		{"version 0", `{"inputs":{},"params":{},"stage":"s","tools":{},"version":0}`, `"version"`},
		{"params not canonical", `{"inputs":{},"params":{"b":1, "a":2},"stage":"s","tools":{},"version":1}`, "canonical"},
		{"params not an object", `{"inputs":{},"params":[1],"stage":"s","tools":{},"version":1}`, "object"},
		{"bad digest", `{"inputs":{"in":"sha256:00"},"params":{},"stage":"s","tools":{},"version":1}`, "invalid digest"},
		{"input name with a slash", `{"inputs":{"a/b":"` + d + `"},"params":{},"stage":"s","tools":{},"version":1}`, "contains"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stages.DecodeKeyMaterial([]byte(tc.in))
			if !errors.Is(err, stages.ErrBadKeyMaterial) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want ErrBadKeyMaterial mentioning %q", err, tc.want)
			}
		})
	}
}

// FuzzDecodeKeyMaterial: anything accepted re-encodes to canonical bytes that decode to the same
// key. Seeds are in testdata/fuzz/FuzzDecodeKeyMaterial.
func FuzzDecodeKeyMaterial(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := stages.DecodeKeyMaterial(b)
		if err != nil {
			if !errors.Is(err, stages.ErrBadKeyMaterial) {
				t.Fatalf("error does not wrap ErrBadKeyMaterial: %v", err)
			}
			return
		}
		c, err := m.Canonical()
		if err != nil {
			t.Fatalf("accepted material does not encode: %v", err)
		}
		m2, err := stages.DecodeKeyMaterial(c)
		if err != nil {
			t.Fatalf("canonical form %s rejected: %v", c, err)
		}
		k1, _ := m.Key()
		k2, _ := m2.Key()
		if k1 != k2 {
			t.Fatalf("key changed across a round trip: %s", c)
		}
	})
}
