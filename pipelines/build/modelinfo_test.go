package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/gguf"
	"orkpipe/stages"
)

func TestFormatParams(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1K"}, {292800, "292.8K"}, {571000, "571K"}, {8_300_000_000, "8.3B"},
		{27_000_000_000, "27B"}, {26_960_000_000, "27B"}, {999_950, "1M"}, {999_949, "999.9K"}, {1_250_000_000_000, "1.3T"}} {
		if got := formatParams(tc.n); got != tc.want {
			t.Errorf("formatParams(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestProvenanceModel: precisions in the order int4, int8, fp16 (promoted twins counted), methods
// sorted, F16 entries adding no method, the size label preferred to the count.
func TestProvenanceModel(t *testing.T) {
	w := func(dtype, method string, promote *stages.FinalizeParams) *weight {
		return &weight{fin: stages.FinalizeParams{DType: dtype, Method: method}, promote: promote}
	}
	meta := sourceMeta{name: "m", arch: "qwen35", params: 27_000_000_000}
	for _, tc := range []struct {
		name       string
		ws         []*weight
		label      string
		prec, meth string
		size       string
	}{
		{"gptq int4", []*weight{w("I4_ROT_A8", "gptq", nil), w("I4", "gptq", nil)}, "", "int4", "gptq", "27B"},
		{"mixed", []*weight{w("I8_ROT", "rtn", nil), w("I4_ROT_A8", "gptq", &stages.FinalizeParams{DType: "I8_ROT", Method: "rtn"}), w("F16", "none", nil)}, "",
			"int4+int8+fp16", "gptq+rtn", "27B"},
		{"size label", []*weight{w("I4_NATIVE", "rtn", nil)}, "8x7B", "int4", "rtn", "8x7B"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := meta
			m.sizeLabel = tc.label
			got := provenanceModel(m, tc.ws, "rk3588")
			want := stages.ProvenanceModel{Name: "m", Architecture: "qwen35", ParamSize: tc.size, Precision: tc.prec, Quantization: tc.meth, BoardProfile: "rk3588"}
			if *got != want {
				t.Errorf("got %+v, want %+v", *got, want)
			}
		})
	}
}

// TestReadSourceMeta: general.name and the parameter count from a real header; a file without
// general.name is named after the file; a name that is not a string is an error naming the key.
func TestReadSourceMeta(t *testing.T) {
	f, err := gguf.Open(t.Context(), testfiles.Path(t, "stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := readSourceMeta(f, "llama")
	if err != nil || m.name != "llama" || m.arch != "llama" || m.params != 292800 {
		t.Fatalf("stories260K: %+v, %v", m, err)
	}
	for _, tc := range []struct {
		name    string
		kv      []gguf.KV
		want    string
		wantErr bool
	}{
		{"no-name.gguf", nil, "no-name", false},
		{"bad-name.gguf", []gguf.KV{{Key: "general.name", Value: gguf.Uint32(7)}}, "", true},
	} {
		path := filepath.Join(t.TempDir(), tc.name)
		writeHeaderOnly(t, path, tc.kv)
		g, err := gguf.Open(t.Context(), path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := readSourceMeta(g, "llama")
		g.Close()
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "general.name") {
				t.Errorf("%s: %+v, %v: want an error naming general.name", tc.name, m, err)
			}
			continue
		}
		if err != nil || m.name != tc.want {
			t.Errorf("%s: %+v, %v: want name %q", tc.name, m, err, tc.want)
		}
	}
}

// writeHeaderOnly writes a GGUF file of kv and no tensors.
func writeHeaderOnly(t *testing.T, path string, kv []gguf.KV) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := gguf.Write(t.Context(), f, gguf.Header{KV: append([]gguf.KV{{Key: "general.architecture", Value: gguf.String("llama")}}, kv...)}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestReadSourceDescription: the general.* keys that describe a model reach the provenance's model
// (and so the pushed ModelPack descriptor); "other" with a license name becomes an SPDX
// LicenseRef; a key of the wrong type is an error naming it; the seeds' fixtures carry a
// description.
func TestReadSourceDescription(t *testing.T) {
	str := func(k, v string) gguf.KV { return gguf.KV{Key: k, Value: gguf.String(v)} }
	full := []gguf.KV{str("general.name", "Qwen3.6-27B"), str("general.basename", "Qwen3.6"), str("general.author", "Qwen Team"),
		str("general.organization", "Qwen"), str("general.license", "apache-2.0"), str("general.description", " A hybrid model. "),
		str("general.url", "https://example.com/q"), str("general.repo_url", "https://example.com/q.git"), str("general.size_label", "27B")}
	for _, tc := range []struct {
		name    string
		kv      []gguf.KV
		want    stages.ProvenanceModel
		wantErr string
	}{
		{"full", full, stages.ProvenanceModel{Name: "Qwen3.6-27B", Family: "Qwen3.6", Author: "Qwen Team", Vendor: "Qwen", License: "apache-2.0",
			Description: "A hybrid model.", DocURL: "https://example.com/q", SourceURL: "https://example.com/q.git"}, ""},
		{"other license", []gguf.KV{str("general.license", "other"), str("general.license.name", "lfm1.0")},
			stages.ProvenanceModel{Name: "other license", License: "LicenseRef-lfm1.0"}, ""},
		{"other license, odd name", []gguf.KV{str("general.license", "other"), str("general.license.name", "LFM Open License v1")},
			stages.ProvenanceModel{Name: "other license, odd name", License: "LicenseRef-LFM-Open-License-v1"}, ""},
		{"other, unnamed", []gguf.KV{str("general.license", "other")}, stages.ProvenanceModel{Name: "other, unnamed", License: "other"}, ""},
		{"bad license", []gguf.KV{{Key: "general.license", Value: gguf.Uint32(2)}}, stages.ProvenanceModel{}, "general.license"},
		{"bad url", []gguf.KV{{Key: "general.repo_url", Value: gguf.Uint32(2)}}, stages.ProvenanceModel{}, "general.repo_url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.name+".gguf")
			writeHeaderOnly(t, path, tc.kv)
			g, err := gguf.Open(t.Context(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			m, err := readSourceMeta(g, "llama")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), path) {
					t.Fatalf("%+v, %v: want an error naming %s and the file", m, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := *provenanceModel(m, nil, "")
			want := tc.want
			want.Architecture = "llama"
			want.ParamSize = m.sizeLabel // no tensors: no count to write without a label
			if got != want {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
	for _, f := range []string{"tiny-qwen35.gguf", "tiny-lfm2moe.gguf"} {
		g, err := gguf.Open(t.Context(), testfiles.Path(t, f))
		if err != nil {
			t.Fatal(err)
		}
		m, err := readSourceMeta(g, "x")
		g.Close()
		if err != nil || !strings.HasPrefix(m.desc.Description, "random-weight ") {
			t.Errorf("%s: description %q, %v: want the header's general.description", f, m.desc.Description, err)
		}
	}
}
