package stages

import (
	"context"
	"errors"
	"fmt"

	"orkpipe/artifacts"
)

// VerifyBoardParams are the parameters of "verify-board": the requirement that a pack (input "pack",
// with its stub "stub") was verified and run on a given board host. Together with the pack, stub
// and text digests (input "text", the evaluation text) they are the node's key: board profile,
// host fingerprint digest (boardhost.Fingerprint.Digest), run program digest (the program and every
// shared object the loader maps, boardhost.Program.Digest) and the run command template.
//
// The node's output "board-verify.json" is the board verification predicate (pipelines/verify
// Predicate: profile and the boardhost report). It is evidence from the board: the build host cannot
// produce it, so the kind is satisfied only by a matching attestation found in the registry
// (pipelines/verify.Executor serves it from there, and the action cache remembers it). Run fails
// with ErrBoardEvidence, saying how to obtain one.
type VerifyBoardParams struct {
	Board       string `json:"board"`
	Command     string `json:"command"`
	Fingerprint string `json:"fingerprint"`
	Program     string `json:"program"`
	// Signer is the ID (registry.KeyID, "SHA256:<hex>") of the key that must have signed the
	// attestation; empty when any trusted signer will do. It is key material, so requiring another
	// key re-checks the registry instead of reusing a result vouched for by the old one.
	Signer string `json:"signer,omitempty"`
}

// VerifyBoardOutput is the output name of a verify-board node.
const VerifyBoardOutput = "board-verify.json"

// ErrBoardEvidence is returned by the run of a verify-board node: its output can only come from
// the board (an attestation), never from running it on a build host.
var ErrBoardEvidence = errors.New("board verification must come from the board")

// VerifyBoard is the "verify-board" stage kind. It is not registered here: its output is not a
// deterministic function of its inputs that a fingerprint table could pin (see
// build_fingerprint_test.go) nor a local run to reproduce; pipelines/verify.RegisterKind registers it
// where a graph needs it.
var VerifyBoard Kind = Define("verify-board", 1, verifyBoardSpec, runVerifyBoard)

func verifyBoardSpec(p VerifyBoardParams) (Spec, error) {
	if p.Board == "" {
		return Spec{}, fmt.Errorf("field \"board\": empty, want a board profile name")
	}
	if p.Command == "" {
		return Spec{}, fmt.Errorf("field \"command\": empty, want the run command template")
	}
	for field, v := range map[string]string{"fingerprint": p.Fingerprint, "program": p.Program} {
		if _, err := artifacts.ParseDigest(v); err != nil {
			return Spec{}, fmt.Errorf("field %q: %v", field, err)
		}
	}
	return Spec{Inputs: []string{"pack", "stub", "text"}, Outputs: []string{VerifyBoardOutput}, PeakMemory: 64 << 20}, nil
}

func runVerifyBoard(_ context.Context, p VerifyBoardParams, req Request) error {
	return fmt.Errorf("%w: no attestation from board host %s (run program %s, command %q) verifying pack %s with text %s was found; "+
		"on that board run `orkpipe verify REF --board %s --run '%s' --text FILE --attest REF --sign KEY`, then build again",
		ErrBoardEvidence, p.Fingerprint, p.Program, p.Command, req.Inputs["pack"].Digest, req.Inputs["text"].Digest, p.Board, p.Command)
}
