package build

import (
	"fmt"

	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/recipe"
	"orkpipe/registry"
	"orkpipe/stages"
)

// BoardVerifyOutput is the export name of the board verification evidence (the attested predicate)
// when the recipe has board_verify.
const BoardVerifyOutput = stages.VerifyBoardOutput

// BoardVerifyParams returns the verify-board parameters a recipe's board_verify requires: exactly
// the fields pipelines/verify.ParamsOf reads from an attestation (with the pack, stub and text
// digests, which are the node's inputs), plus the ID of the trusted key that must have signed it.
func BoardVerifyParams(b *recipe.BoardVerify) (stages.VerifyBoardParams, error) {
	p := stages.VerifyBoardParams{Board: b.Board, Command: b.Command, Fingerprint: b.Fingerprint, Program: b.Program}
	if b.Trust != "" {
		key, err := registry.LoadPublicKey(b.Trust)
		if err != nil {
			return p, fmt.Errorf("%w: board_verify.trust: %w", ErrPlan, err)
		}
		p.Signer = registry.KeyID(key)
	}
	return p, nil
}

// planBoardVerify adds the verify-board node on the build's pack and stub and the requirement's text,
// and exports its output. The node is never run on the build host: the stage kind refuses, and the
// caller's executor (pipelines/verify.Executor) serves it from a matching attestation.
func (t *Target) planBoardVerify(g *engine.Graph, pk, stub engine.Input) error {
	b := t.r.BoardVerify
	if b == nil {
		return nil
	}
	if _, err := stages.Lookup(stages.VerifyBoard.Name()); err != nil {
		return fmt.Errorf("%w: board_verify: the verify-board stage kind is not registered (pipelines/verify.RegisterKind): %w", ErrPlan, err)
	}
	if err := checkFile("board_verify.text", b.Text); err != nil {
		return err
	}
	params, err := BoardVerifyParams(b)
	if err != nil {
		return err
	}
	n := g.Add("verify-board", stages.VerifyBoard.Name(), params,
		map[string]engine.Input{"pack": pk, "stub": stub, "text": engine.File(b.Text)})
	g.Export(BoardVerifyOutput, n.Output(stages.VerifyBoardOutput))
	return nil
}
