package stages

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"orkpipe/ork/model"
	"orkpipe/ork/pack"
)

// EmulatedEntry is the geometry of a pack entry a node emulates (every entry it may hold: the
// planner's finalized weights and their promotions, FinalizeParams.Emulated), all the scratch of one
// Apply of its emulation rests on (model.EmulationBytes): its pack dtype name, rows, stored row length
// (K, or K padded by its rotation), group (0: one scale a row) and Hadamard block (0: not rotated), and
// whether it is a routed expert's slice (an Apply of it may take the tokens of several chunks).
type EmulatedEntry struct {
	DType  string `json:"dtype"`
	N      int    `json:"n"`
	KP     int    `json:"kp"`
	Group  int    `json:"group,omitempty"`
	Block  int    `json:"block,omitempty"`
	Expert bool   `json:"expert,omitempty"`
}

// Emulated returns the geometry of the pack entry name (a weight, or an expert slice "<tensor>#<e>")
// the finalized weight becomes, under KP's contract.
func (p FinalizeParams) Emulated(name string) EmulatedEntry {
	_, _, expert := pack.SplitExpert(name)
	return EmulatedEntry{DType: p.DType, N: p.N, KP: p.KP(), Group: p.Group, Block: p.rotationBlock(), Expert: expert}
}

// EmulatedEntries returns es sorted, each geometry once.
func EmulatedEntries(es []EmulatedEntry) []EmulatedEntry {
	out := slices.Clone(es)
	slices.SortFunc(out, func(a, b EmulatedEntry) int {
		return cmp.Or(cmp.Compare(a.DType, b.DType), cmp.Compare(a.N, b.N), cmp.Compare(a.KP, b.KP),
			cmp.Compare(a.Group, b.Group), cmp.Compare(a.Block, b.Block), boolCompare(a.Expert, b.Expert))
	})
	return slices.Compact(out)
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// validate checks the dtype (spelled as pack.DType.String spells it) and that the geometry is one a pack
// entry has.
func (e EmulatedEntry) validate() error {
	d, err := pack.ParseDType(e.DType)
	switch {
	case err != nil:
		return err
	case d.String() != e.DType:
		return fmt.Errorf("dtype %q: write it %s", e.DType, d)
	case e.N < 1 || e.KP < 1 || e.Group < 0 || e.Block < 0 || e.Block > e.KP:
		return fmt.Errorf("n %d, kp %d, group %d, block %d: want n and kp of at least 1, group and block of at least 0, block at most kp", e.N, e.KP, e.Group, e.Block)
	}
	return nil
}

// meta is the pack meta model.EmulationBytes reads of the entry.
func (e EmulatedEntry) meta() pack.Meta {
	d, _ := pack.ParseDType(e.DType)
	m := pack.Meta{DType: d, N: e.N, K: e.KP, Group: e.Group}
	if e.Block > 0 {
		m.Rotation = pack.Rotation{Kind: pack.RotHadamard, Block: e.Block}
	}
	return m
}

// EmulationScratch is the most scratch one Apply of any entry of es takes (model.EmulationBytes on
// model.EmulationWorkers goroutines, the most Linear's Emulated runs it on whatever the CPUs: the same
// figure on every machine): on tokens tokens, a routed expert's slice on
// expertTokens (model.Config.EvalExpertTokens). An F16 entry takes none here; a sum past int64 is
// math.MaxInt64 (no node fits it).
func EmulationScratch(es []EmulatedEntry, tokens, expertTokens int) int64 {
	var most int64
	for _, e := range es {
		if e.DType == pack.F16.String() {
			continue
		}
		t := tokens
		if e.Expert {
			t = expertTokens
		}
		n, ok := model.EmulationBytes(e.meta(), t, 0)
		if !ok {
			return math.MaxInt64
		}
		most = max(most, n)
	}
	return most
}
