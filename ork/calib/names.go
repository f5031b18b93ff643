package calib

import (
	"fmt"
	"strconv"
	"strings"

	"orkpipe/ork/model"
)

// HessianName is the name of the Hessian of input in of block layer, e.g. "blk.3.ffn_gate_up": the name
// a build gives the file holding it.
func HessianName(layer int, in model.Input) string { return fmt.Sprintf("blk.%d.%s", layer, in) }

// WeightInput maps a block weight name ("blk.<l>.<weight>.weight") to its layer and the input whose
// Hessian GPTQ uses for it; ok is false for tensors outside blocks or without a captured input.
func WeightInput(name string) (layer int, in model.Input, ok bool) {
	rest, found := strings.CutPrefix(name, "blk.")
	if !found {
		return 0, 0, false
	}
	idx, suffix, found := strings.Cut(rest, ".")
	if !found {
		return 0, 0, false
	}
	l, err := strconv.Atoi(idx)
	if err != nil || l < 0 || strconv.Itoa(l) != idx {
		return 0, 0, false
	}
	w, found := strings.CutSuffix(suffix, ".weight")
	if !found {
		return 0, 0, false
	}
	for i := model.Input(0); i < model.NumInputs; i++ {
		for _, x := range i.Weights() {
			if x == w {
				return l, i, true
			}
		}
	}
	return 0, 0, false
}
