package main

import (
	"slices"
	"testing"

	"orkpipe/registry"
)

// TestModelLine: describe prints what the config records about the model and nothing for what it
// does not (a build that recorded no model metadata prints no model line at all).
func TestModelLine(t *testing.T) {
	tests := []struct {
		name, version, arch, params, precision, quant string
		want                                          string
	}{
		{"stories260K", "1", "llama", "292800", "int4", "rtn-g32", "stories260K 1 (llama, 292800 params, int4, rtn-g32)"},
		{"", "", "", "", "", "", ""},
		{"demo", "", "", "", "", "", "demo"},
		{"", "", "llama", "", "", "gptq-g32", "(llama, gptq-g32)"},
		{"m", "v2", "", "7B", "", "", "m v2 (7B params)"},
	}
	for _, tc := range tests {
		if got := modelLine(tc.name, tc.version, tc.arch, tc.params, tc.precision, tc.quant); got != tc.want {
			t.Errorf("modelLine(%q, %q, %q, %q, %q, %q) = %q, want %q", tc.name, tc.version, tc.arch, tc.params, tc.precision, tc.quant, got, tc.want)
		}
	}
}

// TestDescriptorLines: the descriptor's family, authors, vendor, licenses, description (on one
// line) and URLs, in that order, the empty ones left out.
func TestDescriptorLines(t *testing.T) {
	var c registry.ModelConfig
	if got := descriptorLines(c); len(got) != 0 {
		t.Errorf("empty descriptor: %q, want no lines", got)
	}
	c.Descriptor.Family, c.Descriptor.Authors, c.Descriptor.Licenses = "Qwen3.6", []string{"Qwen Team", "B"}, []string{"apache-2.0"}
	c.Descriptor.Description, c.Descriptor.SourceURL = "a hybrid\n  model ", "https://example.com/q.git"
	want := [][2]string{{"family", "Qwen3.6"}, {"authors", "Qwen Team, B"}, {"license", "apache-2.0"}, {"about", "a hybrid model"},
		{"source", "https://example.com/q.git"}}
	if got := descriptorLines(c); !slices.Equal(got, want) {
		t.Errorf("descriptorLines = %q, want %q", got, want)
	}
}
