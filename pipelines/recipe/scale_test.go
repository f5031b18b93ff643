package recipe

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestScaleKeys: scale_search and scale_sign take their words in the file and by --set. scale_search's
// default (weighted) is stored as "" and left out of the recipe's JSON (plan key material), so spelling
// it plans the same nodes; scale_sign defaults to search for 4-bit GPTQ schemes, stays positive when
// such a scheme says so, and is empty (positive) for RTN schemes unless they say search.
func TestScaleKeys(t *testing.T) {
	r, err := Parse([]byte(good), "/r/demo.yaml", "schemes.0.scale_search=gptq", "schemes.1.scale_sign=search")
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Schemes[0]; s.ScaleSearch != "gptq" || s.ScaleSign != "search" {
		t.Errorf("scheme 0: scale_search %q, scale_sign %q", s.ScaleSearch, s.ScaleSign)
	}
	if s := r.Schemes[1]; s.ScaleSearch != "" || s.ScaleSign != "search" {
		t.Errorf("scheme 1: scale_search %q, scale_sign %q", s.ScaleSearch, s.ScaleSign)
	}
	b, _ := json.Marshal(r)
	if !strings.Contains(string(b), `"scale_search":"gptq","scale_sign":"search"`) {
		t.Errorf("JSON: %s", b)
	}
	r, err = Parse([]byte(good), "/r/demo.yaml", "schemes.0.scale_sign=positive")
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Schemes[0]; s.ScaleSign != "positive" {
		t.Errorf("gptq scheme with scale_sign positive: %q", s.ScaleSign)
	}
	if s := r.Schemes[1]; s.ScaleSign != "" {
		t.Errorf("rtn scheme without scale_sign: %q, want empty (positive)", s.ScaleSign)
	}
	plain, err := Parse([]byte(good), "/r/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spelled, err := Parse([]byte(good), "/r/demo.yaml", "schemes.0.scale_search=weighted", "schemes.0.scale_sign=search")
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := json.Marshal(plain)
	sb, _ := json.Marshal(spelled)
	if string(pb) != string(sb) || strings.Contains(string(pb), "scale_search") {
		t.Errorf("defaults spelled out change the recipe's JSON:\n%s\n%s", pb, sb)
	}
	i8, err := Parse([]byte(good), "/r/demo.yaml", "schemes.1.dtype=I8")
	if err != nil {
		t.Fatal(err)
	}
	if s := i8.Schemes[1]; s.ScaleSign != "" {
		t.Errorf("I8 scheme: scale_sign %q, want empty", s.ScaleSign)
	}
}

func TestScaleErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"search word", []string{"schemes.0.scale_search=mse"}, `scale_search: want weighted or gptq, got "mse"`},
		{"gptq search with rtn", []string{"schemes.1.scale_search=gptq"}, "scale_search gptq with method rtn"},
		{"gptq search per channel", []string{"schemes.0.scale_search=gptq", "schemes.0.group=0"}, "scale_search gptq with group 0"},
		{"gptq search act_order", []string{"schemes.0.scale_search=gptq", "schemes.0.act_order=true"}, "scale_search gptq with act_order"},
		{"sign word", []string{"schemes.0.scale_sign=negative"}, `scale_sign: want positive or search, got "negative"`},
		{"sign with int8", []string{"schemes.1.dtype=I8", "schemes.1.scale_sign=search"}, "scale_sign search with dtype I8"},
		{"sign with F16", []string{"schemes.1.dtype=F16", "schemes.1.group=0", "schemes.1.scale_sign=search"}, "scale_sign search with dtype F16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(good), "/r/demo.yaml", tc.sets...)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestScaleRefitKey: scale_refit takes 0..4 rounds on a quantized gptq scheme without act_order, is
// refused elsewhere naming the key, and the recipe's JSON spells it only when set.
func TestScaleRefitKey(t *testing.T) {
	r, err := Parse([]byte(good), "/r/demo.yaml", "schemes.0.scale_refit=2")
	if err != nil {
		t.Fatal(err)
	}
	if r.Schemes[0].ScaleRefit != 2 {
		t.Fatalf("scale_refit = %d, want 2", r.Schemes[0].ScaleRefit)
	}
	if b, _ := json.Marshal(r); !strings.Contains(string(b), `"scale_refit":2`) {
		t.Errorf("JSON %s: want scale_refit 2", b)
	}
	if r, err := Parse([]byte(good), "/r/demo.yaml"); err != nil {
		t.Fatal(err)
	} else if b, _ := json.Marshal(r); strings.Contains(string(b), "scale_refit") {
		t.Errorf("JSON %s: scale_refit unset but spelled", b)
	}
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"schemes.0.scale_refit=5"}, "scale_refit: want 0..4 rounds, got 5"},
		{[]string{"schemes.0.scale_refit=-1"}, "scale_refit: want 0..4 rounds, got -1"},
		{[]string{"schemes.1.scale_refit=1"}, "scale_refit with method rtn"},
		{[]string{"schemes.0.scale_refit=1", "schemes.0.act_order=true"}, "scale_refit with method gptq, dtype I4_ROT_A8, act_order true"},
		{[]string{"schemes.0.scale_refit=1", "schemes.0.dtype=F16", "schemes.0.group=0"}, "scale_refit with method gptq, dtype F16"},
	} {
		if _, err := Parse([]byte(good), "/r/demo.yaml", tc.sets...); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.sets, err, tc.want)
		}
	}
}
