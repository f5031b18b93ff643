package build

import (
	"context"

	"orkpipe/ork/board"
	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

// BoardPlan is the domain plan the planner checks the recipe's pack against (checkBoardFit), for tests
// that compare it with the plan of the pack write-orkpack commits.
func (t *Target) BoardPlan(ctx context.Context) (board.Plan, error) {
	src, err := t.planSource(ctx, engine.NewGraph())
	if err != nil {
		return board.Plan{}, err
	}
	ws, err := t.selectWeights(src)
	if err != nil {
		return board.Plan{}, err
	}
	prof, err := t.profile()
	if err != nil {
		return board.Plan{}, err
	}
	return checkBoardFit(ws, prof, t.r.Residency)
}

// FinalizeParams returns the finalize parameters the planner gives each selected weight and its promoted
// twin (nil without one), by weight name.
func (t *Target) FinalizeParams(ctx context.Context) (map[string]stages.FinalizeParams, map[string]*stages.FinalizeParams, error) {
	src, err := t.planSource(ctx, engine.NewGraph())
	if err != nil {
		return nil, nil, err
	}
	ws, err := t.selectWeights(src)
	if err != nil {
		return nil, nil, err
	}
	fin, promote := map[string]stages.FinalizeParams{}, map[string]*stages.FinalizeParams{}
	for _, w := range ws {
		fin[w.name], promote[w.name] = w.fin, w.promote
	}
	return fin, promote, nil
}

// BlockOf exports blockOf.
var BlockOf = blockOf
