package main

import (
	"strconv"
	"testing"
)

// TestDepsCell: a plan table's DEPS cell lists a few dependencies as they are, one item per MoE tensor's
// expert slices (a contiguous run as a range, else a count), and at most maxDepsShown items before
// saying how many more there are.
func TestDepsCell(t *testing.T) {
	exps := func(id string, es ...int) []string {
		var out []string
		for _, e := range es {
			out = append(out, id+"#"+strconv.Itoa(e))
		}
		return out
	}
	many := append([]string{"synth", "tokenize"}, exps("finalize:blk.2.ffn_down_exps.weight", 0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9)...)
	many = append(many, exps("finalize:blk.2.ffn_up_exps.weight", 0, 2, 5)...)
	many = append(many, exps("finalize:blk.2.ffn_gate_exps.weight", 7)...)
	for _, c := range []struct {
		deps []string
		want string
	}{
		{nil, ""},
		{[]string{"synth", "tokenize"}, "synth,tokenize"},
		{many, "synth,tokenize,finalize:blk.2.ffn_down_exps.weight#0-11,finalize:blk.2.ffn_up_exps.weight#{3 experts},finalize:blk.2.ffn_gate_exps.weight#7"},
		{[]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}, "a,b,c,d,e,f,g,h,+2 more"},
		{[]string{"x#y", "z#-1"}, "x#y,z#-1"},
	} {
		if got := depsCell(c.deps); got != c.want {
			t.Errorf("depsCell(%v) = %q, want %q", c.deps, got, c.want)
		}
	}
}
