package build

import (
	"fmt"
	"slices"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/recipe"
)

// profile returns the recipe's board profile: the built-in of that name, or the JSON profile file.
func (t *Target) profile() (board.Profile, error) {
	p, err := loadBoard(t.r.Board)
	if err != nil {
		return board.Profile{}, fmt.Errorf("%w: board: %w", ErrPlan, err)
	}
	return p, nil
}

// packEntries returns the pack entries the weights become, in write-orkpack's order, each at its
// base tier: name, dtype and shape (K as stored, padded by the rotation), everything board.ResidentBytes
// reads. They describe the pack before any node runs.
func packEntries(ws []*weight) ([]pack.Entry, error) {
	es := make([]pack.Entry, len(ws))
	for i, w := range ws {
		dt, err := pack.ParseDType(w.fin.DType)
		if err != nil {
			return nil, fmt.Errorf("%w: weight %s: %w", ErrPlan, w.name, err)
		}
		es[i] = pack.Entry{Meta: pack.Meta{Name: w.name, DType: dt, K: w.fin.KP(), N: w.fin.N}}
	}
	return es, nil
}

// checkBoardFit refuses, before any node runs, a pack the board would refuse: every entry's resident
// size follows from its dtype and shape alone (board.ResidentBytes), and board.PlanDomains places the
// entries exactly as write-orkpack will when it commits the pack. An unsupported dtype or shape, an
// entry larger than a domain, or more domains than the board has is an error wrapping ErrPlan (the last
// two also board.ErrDoesNotFit, with a *board.FitError holding the numbers). With a residency section
// the experts' residency window is checked the same way (board.ResidencyWindow): the dense entries and
// the budget's experts (every expert when the budget asks them all) must fit the residency's domains, or
// the error holds a *board.ResidencyError naming the experts, their bytes and the window. A promotion
// never makes a fitting pack unfit: write-orkpack skips a candidate whose promotion would.
func checkBoardFit(ws []*weight, p board.Profile, res *recipe.Residency) (board.Plan, error) {
	es, err := packEntries(ws)
	if err != nil {
		return board.Plan{}, err
	}
	pl, err := board.PlanDomains(es, p)
	if err != nil {
		return board.Plan{}, fmt.Errorf("%w: the pack would not load on board %s: %w", ErrPlan, p.Name, err)
	}
	if res == nil {
		return pl, nil
	}
	if !slices.ContainsFunc(es, func(e pack.Entry) bool { _, _, ok := pack.ExpertBlock(e.Name); return ok }) {
		return board.Plan{}, fmt.Errorf("%w: residency: the pack has no MoE expert entries (blk.N.ffn_*_exps.weight#e) to plan", ErrPlan)
	}
	if _, _, _, err := board.ResidencyWindow(es, res.Spec(), res.Domains, p); err != nil {
		return board.Plan{}, fmt.Errorf("%w: residency on board %s: %w", ErrPlan, p.Name, err)
	}
	return pl, nil
}
