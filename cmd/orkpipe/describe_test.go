package main

import (
	"slices"
	"testing"

	"orkpipe/registry"
)

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
