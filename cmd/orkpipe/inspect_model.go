package main

import (
	"fmt"
	"strings"

	"orkpipe/ork/gguf"
	"orkpipe/ork/model"
)

// inspectModel is what `inspect` says of a GGUF file as a model to build from: its shape as the
// forward pass reads it (model.ConfigFromGGUF, then Config.CheckTensors), or why it cannot be read
// (a shard, a multi-token-prediction draft, an architecture not implemented, a tensor missing or of
// another shape: Error). Builds, eval and calibration refuse such a file for the same reason.
type inspectModel struct {
	Arch   string `json:"arch,omitempty"`
	Blocks int    `json:"blocks,omitempty"`
	// Kinds counts the blocks by kind, "<mixer>" or "<mixer>+moe" (attention, gated-attention,
	// deltanet, shortconv), in the order the kinds first appear.
	Kinds       []inspectKind `json:"kinds,omitempty"`
	NextN       int           `json:"nextn,omitempty"`
	Embd        int           `json:"embd,omitempty"`
	Vocab       int           `json:"vocab,omitempty"`
	Experts     int           `json:"experts,omitempty"`
	ExpertsUsed int           `json:"experts_used,omitempty"`
	Error       string        `json:"error,omitempty"`
}

type inspectKind struct {
	Kind   string `json:"kind"`
	Blocks int    `json:"blocks"`
}

// modelOf reads f as a model (inspectModel).
func modelOf(f *gguf.File) inspectModel {
	c, err := model.ConfigFromGGUF(f)
	if err == nil {
		err = c.CheckTensors(f)
	}
	if err != nil {
		return inspectModel{Error: err.Error()}
	}
	m := inspectModel{Arch: c.Arch, Blocks: c.NLayer, NextN: c.NextN, Embd: c.NEmbd, Vocab: c.NVocab,
		Experts: c.NExpert, ExpertsUsed: c.NExpertUsed}
	at := map[string]int{}
	for l := range c.NLayer {
		k := c.Kind(l)
		name := k.Mixer.String()
		if k.FFN == model.FFNMoE {
			name += "+moe"
		}
		i, ok := at[name]
		if !ok {
			i = len(m.Kinds)
			at[name] = i
			m.Kinds = append(m.Kinds, inspectKind{Kind: name})
		}
		m.Kinds[i].Blocks++
	}
	return m
}

// String is the text line: "model: qwen35, 7 blocks (6 deltanet, 1 gated-attention) + 1
// multi-token-prediction block (not packed), n_embd 64, vocab 512", or "model: not readable by the
// forward pass: ...".
func (m inspectModel) String() string {
	if m.Error != "" {
		return "model: not readable by the forward pass: " + m.Error
	}
	kinds := make([]string, len(m.Kinds))
	for i, k := range m.Kinds {
		kinds[i] = fmt.Sprintf("%d %s", k.Blocks, k.Kind)
	}
	s := fmt.Sprintf("model: %s, %d blocks (%s)", m.Arch, m.Blocks, strings.Join(kinds, ", "))
	if m.NextN > 0 {
		s += fmt.Sprintf(" + %d multi-token-prediction block (not packed)", m.NextN)
		if m.NextN > 1 {
			s = strings.Replace(s, "prediction block (", "prediction blocks (", 1)
		}
	}
	s += fmt.Sprintf(", n_embd %d, vocab %d", m.Embd, m.Vocab)
	if m.Experts > 0 {
		s += fmt.Sprintf(", %d experts, %d used a token", m.Experts, m.ExpertsUsed)
	}
	return s
}
