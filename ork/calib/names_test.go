package calib

import (
	"testing"

	"orkpipe/ork/model"
)

func TestWeightInput(t *testing.T) {
	for _, c := range []struct {
		name  string
		layer int
		in    model.Input
		ok    bool
	}{
		{"blk.0.attn_q.weight", 0, model.InputQKV, true},
		{"blk.12.attn_v.weight", 12, model.InputQKV, true},
		{"blk.3.attn_output.weight", 3, model.InputAttnO, true},
		{"blk.3.ffn_up.weight", 3, model.InputGateUp, true},
		{"blk.4.ffn_down.weight", 4, model.InputDown, true},
		{"blk.4.ffn_down.bias", 0, 0, false},
		{"blk.4.attn_norm.weight", 0, 0, false},
		{"blk.04.attn_q.weight", 0, 0, false},
		{"output.weight", 0, 0, false},
		{"token_embd.weight", 0, 0, false},
	} {
		l, in, ok := WeightInput(c.name)
		if ok != c.ok || (ok && (l != c.layer || in != c.in)) {
			t.Errorf("%s: (%d, %v, %v), want (%d, %v, %v)", c.name, l, in, ok, c.layer, c.in, c.ok)
		}
	}
	if got := HessianName(3, model.InputGateUp); got != "blk.3.ffn_gate_up" {
		t.Errorf("HessianName = %q", got)
	}
}
