package build

import (
	"context"

	"orkpipe/ork/board"
	"orkpipe/pipelines/engine"
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
