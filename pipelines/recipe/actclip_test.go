package recipe

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestActClipKeys: act_clip is a ratio or search, in the file and by --set; search defaults
// calibration.act_sample; the recipe's JSON (provenance, plan key material) spells the clip as written
// and leaves it out when unset.
func TestActClipKeys(t *testing.T) {
	r, err := Parse([]byte(good), "/r/demo.yaml", "schemes.0.act_clip=search", "schemes.1.act_clip=0.85", "schemes.0.act_clip_grid=[1, 0.9]")
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Schemes[0]; !s.Searches() || len(s.ActClipGrid) != 2 || r.Calibration.ActSample != DefaultActSample {
		t.Errorf("scheme 0: %+v, act_sample %d", s.ActClip, r.Calibration.ActSample)
	}
	if s := r.Schemes[1]; s.Searches() || s.ActClip.Ratio != 0.85 {
		t.Errorf("scheme 1: %+v", s.ActClip)
	}
	b, _ := json.Marshal(r)
	if !strings.Contains(string(b), `"act_clip":"search","act_clip_grid":[1,0.9]`) || !strings.Contains(string(b), `"act_clip":0.85`) ||
		!strings.Contains(string(b), `"act_sample":1024`) {
		t.Errorf("JSON: %s", b)
	}
	plain, err := Parse([]byte(good), "/r/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(plain); strings.Contains(string(b), "act_clip") || strings.Contains(string(b), "act_sample") {
		t.Errorf("a recipe without act_clip mentions it: %s", b)
	}
	r, err = Parse([]byte(good), "/r/demo.yaml", "schemes.1.act_clip=search", "calibration.act_sample=64")
	if err != nil || r.Calibration.ActSample != 64 {
		t.Fatalf("act_sample 64: %v %+v", err, r.Calibration)
	}
}

func TestActClipErrors(t *testing.T) {
	noCalib := strings.Replace(good, "method: gptq", "method: rtn", 1)
	noCalib = noCalib[:strings.Index(noCalib, "calibration:")] + noCalib[strings.Index(noCalib, "schemes:"):]
	for _, tc := range []struct {
		name string
		yaml string
		sets []string
		want string
	}{
		{"ratio above 1", good, []string{"schemes.0.act_clip=1.5"}, "act_clip: want a ratio in (0, 1] or search, got 1.5"},
		{"ratio 0", good, []string{"schemes.0.act_clip=0"}, "act_clip: want a ratio in (0, 1] or search, got 0"},
		{"a word", good, []string{"schemes.0.act_clip=auto"}, "act_clip: want a ratio in (0, 1] or search, got auto"},
		{"grid without search", good, []string{"schemes.0.act_clip_grid=[0.9]"}, "act_clip_grid: set, but act_clip is not search"},
		{"grid ratio", good, []string{"schemes.0.act_clip=search", "schemes.0.act_clip_grid=[1, 1.2]"}, "act_clip_grid: ratios must be in (0, 1], got 1.2"},
		{"F16", good, []string{"schemes.1.dtype=F16", "schemes.1.act_clip=0.9"}, "act_clip with dtype F16"},
		{"act_sample without search", good, []string{"calibration.act_sample=100"}, "calibration.act_sample: 100 set, but no scheme uses act_clip: search"},
		{"act_sample negative", good, []string{"schemes.0.act_clip=search", "calibration.act_sample=-1"}, "calibration.act_sample: want a positive number"},
		{"search without calibration", noCalib, []string{"schemes.1.act_clip=search"}, "calibration: required because a scheme uses act_clip: search"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "/r/demo.yaml", tc.sets...)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRotationKeyErrors(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"schemes.0.rotation_seed=layer"}, `rotation_seed: want weight or site, got "layer"`},
		{[]string{"schemes.1.rotation_seed=site"}, "rotation_seed, rotation_block, rotation_salt: set, but rotation is none"},
		{[]string{"schemes.1.rotation_salt=s1"}, "rotation_seed, rotation_block, rotation_salt: set, but rotation is none"},
		{[]string{"schemes.0.rotation_salt=a b"}, `rotation_salt: want at most 64 letters, digits, '.', '_' or '-', got "a b"`},
		{[]string{"schemes.0.rotation_salt=" + strings.Repeat("s", 65)}, "rotation_salt: want at most 64"},
		{[]string{"schemes.0.rotation_block=96"}, "rotation_block: want a power of two from 32 to 65536, got 96"},
		{[]string{"schemes.0.rotation_search=65"}, "rotation_search: want 0..64 seeds, got 65"},
		{[]string{"schemes.0.rotation_search=-1"}, "rotation_search: want 0..64 seeds, got -1"},
		{[]string{"schemes.0.rotation_search=4", "schemes.0.rotation_seed=site"}, "rotation_search with rotation_seed: site"},
		{[]string{"schemes.1.rotation=hadamard", "schemes.1.rotation_search=4"}, "rotation_search: 4 seeds with method rtn, rotation hadamard: want gptq with hadamard"},
	} {
		if _, err := Parse([]byte(good), "/r/demo.yaml", tc.sets...); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.sets, err, tc.want)
		}
	}
	if r, err := Parse([]byte(good), "/r/demo.yaml", "schemes.0.rotation_seed=site", "schemes.0.rotation_block=256"); err != nil ||
		r.Schemes[0].RotationSeed != "site" || r.Schemes[0].RotationBlock != 256 {
		t.Errorf("site seed and block 256: %v", err)
	}
	if r, err := Parse([]byte(good), "/r/demo.yaml", "schemes.0.rotation_salt=s1-A.b_2"); err != nil || r.Schemes[0].RotationSalt != "s1-A.b_2" {
		t.Errorf("rotation_salt s1-A.b_2: %v", err)
	}
	if r, err := Parse([]byte(good), "/r/demo.yaml", "schemes.0.rotation_search=8"); err != nil || r.Schemes[0].RotationSearch != 8 {
		t.Errorf("rotation_search 8: %v", err)
	}
}

// TestGPTQInputsKeys: gptq_inputs is float (stored as nothing), quantized or asymmetric; the two that
// quantize the inputs default calibration.act_sample like act_clip: search, and the recipe's JSON spells
// them as written.
func TestGPTQInputsKeys(t *testing.T) {
	for _, v := range []string{"quantized", "asymmetric"} {
		r, err := Parse([]byte(good), "/r/demo.yaml", "schemes.0.gptq_inputs="+v)
		if err != nil {
			t.Fatal(err)
		}
		if s := r.Schemes[0]; s.GPTQInputs != v || !s.SamplesInputs() || s.Searches() || r.Calibration.ActSample != DefaultActSample {
			t.Errorf("%s: scheme %+v, act_sample %d", v, s, r.Calibration.ActSample)
		}
		if b, _ := json.Marshal(r); !strings.Contains(string(b), `"gptq_inputs":"`+v+`"`) || !strings.Contains(string(b), `"act_sample":1024`) {
			t.Errorf("%s: JSON %s", v, b)
		}
	}
	r, err := Parse([]byte(good), "/r/demo.yaml", "schemes.0.gptq_inputs=float")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(r); r.Schemes[0].GPTQInputs != "" || r.Schemes[0].SamplesInputs() || strings.Contains(string(b), "gptq_inputs") || strings.Contains(string(b), "act_sample") {
		t.Errorf("gptq_inputs float: %+v, JSON %s", r.Schemes[0], b)
	}
}

func TestGPTQInputsErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"a word", []string{"schemes.0.gptq_inputs=int4"}, `gptq_inputs: want float, quantized or asymmetric, got "int4"`},
		{"rtn", []string{"schemes.1.gptq_inputs=quantized"}, "gptq_inputs quantized with method rtn"},
		{"F16", []string{"schemes.0.dtype=F16", "schemes.0.group=0", "schemes.0.gptq_inputs=asymmetric"}, "gptq_inputs asymmetric with dtype F16"},
		{"act_order", []string{"schemes.0.gptq_inputs=asymmetric", "schemes.0.act_order=true"}, "gptq_inputs asymmetric with act_order"},
		{"act_sample with float", []string{"schemes.0.gptq_inputs=float", "calibration.act_sample=100"}, "calibration.act_sample: 100 set, but no scheme uses act_clip: search or gptq_inputs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(good), "/r/demo.yaml", tc.sets...)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
