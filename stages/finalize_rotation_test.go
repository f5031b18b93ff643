package stages_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"orkpipe/stages"
)

// TestPaddedK: the stored row length of k inputs under a rotation, or an error wrapping
// stages.ErrBadParams naming the field. PaddedK used to return k for any rotation but hadamard
// and for a k quant.NewRotation refuses, so a caller planned a row length no finalize writes.
func TestPaddedK(t *testing.T) {
	for _, c := range []struct {
		k        int
		rotation string
		want     int
		err      string
	}{
		{96, "hadamard", 96, ""}, // 3 blocks of 32
		{100, "hadamard", 128, ""},
		{100, "none", 100, ""},
		{0, "hadamard", 0, "rotation hadamard with k 0"},
		{-5, "none", 0, "k -5: want positive"},
		{64, "hadamrad", 0, `rotation "hadamrad": want none or hadamard`},
		{64, "", 0, `rotation "": want none or hadamard`},
	} {
		got, err := stages.PaddedK(c.k, c.rotation)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("PaddedK(%d, %q) = %d, %v; want %d", c.k, c.rotation, got, err, c.want)
		case c.err != "" && (err == nil || !errors.Is(err, stages.ErrBadParams) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("PaddedK(%d, %q) = %d, %v; want an ErrBadParams error containing %q", c.k, c.rotation, got, err, c.err)
		}
	}
}

// TestFinalizeRotationRefused: finalize parameters whose Hadamard rotation cannot be built (k < 1, a
// rotation_block that is not a power of two) have no stored row length. CheckRotation says why,
// naming the tensor and the fields; Bind refuses them; KP, which used to return K for them (a row
// length no finalize writes, which the planner sized tile and write-orkpack nodes by), panics with
// that error instead.
func TestFinalizeRotationRefused(t *testing.T) {
	const tensor = "blk.0.ffn_down.weight"
	for _, c := range []struct {
		name string
		k    int
		blk  int
		want string
	}{
		{"rotation_block not a power of two", 96, 48, "tensor blk.0.ffn_down.weight: rotation hadamard with k 96, rotation_block 48"},
		{"k zero", 0, 0, "tensor blk.0.ffn_down.weight: rotation hadamard with k 0, rotation_block 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := stages.FinalizeParams{Tensor: tensor, Method: "rtn", DType: "I4_ROT_A8", Rotation: "hadamard", ActBits: 8,
				N: 64, K: c.k, RotationBlock: c.blk}
			err := p.CheckRotation()
			if err == nil || !errors.Is(err, stages.ErrBadParams) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("CheckRotation: %v, want an ErrBadParams error containing %q", err, c.want)
			}
			k, err := stages.Lookup("finalize")
			if err != nil {
				t.Fatal(err)
			}
			params := fmt.Sprintf(`{"tensor":%q,"method":"rtn","dtype":"I4_ROT_A8","group":32,"rotation":"hadamard","act_bits":8,"clip_grid":null,"damp":0,"act_order":false,"seed":0,"n":64,"k":%d,"rotation_block":%d}`,
				tensor, c.k, c.blk)
			if _, err := k.Bind([]byte(params)); err == nil {
				t.Errorf("Bind accepted %s", params)
			}
			func() {
				defer func() {
					r := recover()
					if msg := fmt.Sprint(r); r == nil || !strings.Contains(msg, c.want) {
						t.Errorf("KP panicked with %v, want a message containing %q", r, c.want)
					}
				}()
				t.Errorf("KP = %d, want a panic", p.KP())
			}()
		})
	}
	// A valid rotation: KP pads as finalize does, CheckRotation accepts it.
	p := stages.FinalizeParams{Tensor: tensor, Rotation: "hadamard", N: 64, K: 100, RotationBlock: 256}
	if err := p.CheckRotation(); err != nil || p.KP() != 256 {
		t.Errorf("k 100, rotation_block 256: KP %d, CheckRotation %v; want 256, nil", p.KP(), err)
	}
}
