package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"orkpipe/artifacts"
	"orkpipe/ork/boardhost"
	"orkpipe/pipelines/engine"
	"orkpipe/registry"
	"orkpipe/stages"
)

var registerOnce sync.Once

// RegisterKind registers the "verify-board" stage kind (stages.VerifyBoard); call it before planning
// a graph that requires a board verification. It is idempotent. The kind is not registered by an
// init function, in stages or here, because it is evidence from the board rather than a function
// the build host can run: it has no output fingerprint (stages' fingerprint table) and no local
// `node exec` reproduction (cmd/orkpipe's node test), which every registered kind must have.
func RegisterKind() {
	registerOnce.Do(func() { stages.Register(stages.VerifyBoard) })
}

// ParamsOf returns the verify-board parameters and input digests (pack, stub, text) that a board
// verification proves: the node it satisfies. The report must have passed and carry a run with its
// program and the three inputs.
func ParamsOf(p *Predicate, rep *boardhost.Report) (stages.VerifyBoardParams, map[string]artifacts.Digest, error) {
	if !rep.OK() {
		return stages.VerifyBoardParams{}, nil, fmt.Errorf("the verification failed (%s)", strings.Join(rep.Failed(), ", "))
	}
	if rep.Fingerprint == nil || rep.Run == nil || rep.Run.Program == nil {
		return stages.VerifyBoardParams{}, nil, fmt.Errorf("the verification has no fingerprint or no run")
	}
	inputs := map[string]artifacts.Digest{}
	for _, in := range rep.Inputs {
		d, err := artifacts.ParseDigest(in.Digest)
		if err != nil {
			return stages.VerifyBoardParams{}, nil, fmt.Errorf("input %s: %w", in.Role, err)
		}
		inputs[in.Role] = d
	}
	for _, role := range []string{"pack", "stub", "text"} {
		if _, ok := inputs[role]; !ok {
			return stages.VerifyBoardParams{}, nil, fmt.Errorf("the run had no %s input", role)
		}
	}
	return stages.VerifyBoardParams{Board: p.Board, Command: rep.Run.Command,
		Fingerprint: rep.Fingerprint.Digest(), Program: rep.Run.Program.Digest}, inputs, nil
}

// Adopter stores a finished file in the CAS (artifacts.Store and the engine's Store have it).
type Adopter interface {
	TempDir(ctx context.Context) (string, error)
	AdoptFile(ctx context.Context, path string) (artifacts.Object, error)
}

// Executor serves verify-board nodes from board verification attestations attached to the artifact
// at Ref, and passes every other node to Next. A verify-board node is satisfied by an attestation
// whose report passed and whose pack, stub and text digests, board profile, host fingerprint, run
// program and command equal the node's; with registry.WithTrust in Options, it must also be signed
// by a trusted key. The attested predicate becomes the node's output (the engine then records it in
// the action cache, so the next build is a cache hit without asking the registry). Nothing is run;
// without a match the node fails with ErrNotSatisfied, saying why each attestation did not match.
type Executor struct {
	Next    engine.Executor
	Store   Adopter
	Ref     string
	Options []registry.Option
	Trusted bool // require a signature by a key given with registry.WithTrust
	Logger  *slog.Logger
}

// Engine returns x as the engine's executor: x itself, or, when Next runs nodes elsewhere
// (engine.ProvenanceExecutor: --executor dagger), an executor that is one too, so that every other
// node keeps the provenance of the host and binary that ran it. A verify-board node is served in
// this process either way and reports no remote provenance (the engine records this process).
func (x *Executor) Engine() engine.Executor {
	if next, ok := x.Next.(engine.ProvenanceExecutor); ok {
		return &provenanceExecutor{Executor: x, next: next}
	}
	return x
}

// provenanceExecutor is an Executor whose Next is an engine.ProvenanceExecutor.
type provenanceExecutor struct {
	*Executor
	next engine.ProvenanceExecutor
}

// ExecuteProvenance implements engine.ProvenanceExecutor.
func (x *provenanceExecutor) ExecuteProvenance(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, artifacts.Provenance, error) {
	if req.Material.Stage != stages.VerifyBoard.Name() {
		return x.next.ExecuteProvenance(ctx, req)
	}
	outs, err := x.Executor.Execute(ctx, req)
	return outs, artifacts.Provenance{}, err
}

// Execute implements engine.Executor.
func (x *Executor) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	if req.Material.Stage != stages.VerifyBoard.Name() {
		return x.Next.Execute(ctx, req)
	}
	var want stages.VerifyBoardParams
	if err := json.Unmarshal(req.Material.Params, &want); err != nil {
		return nil, fmt.Errorf("verify-board params: %w", err)
	}
	d, err := registry.Describe(ctx, x.Ref, append(slices.Clip(x.Options), registry.WithPreferredPredicates(PredicateType))...)
	if err != nil {
		return nil, fmt.Errorf("looking for board verifications of %s: %w", x.Ref, err)
	}
	var why []string
	for _, v := range Verifications(d) {
		reason := x.mismatch(v, want, req.Material.Inputs)
		if reason == "" {
			return x.adopt(ctx, v)
		}
		why = append(why, fmt.Sprintf("attestation %s (host %q): %s", v.Attestation, v.Host, reason))
	}
	if len(why) == 0 {
		why = append(why, "none attached")
	}
	if d.SkippedAttestations > 0 {
		why = append(why, fmt.Sprintf("%d more attestations listed were not fetched (Describe's bounds)", d.SkippedAttestations))
	}
	return nil, fmt.Errorf("%w: %s: no board verification of pack %s on board host %s with run program %s, command %q and text %s:\n  %s",
		ErrNotSatisfied, x.Ref, req.Material.Inputs["pack"], want.Fingerprint, want.Program, want.Command, req.Material.Inputs["text"], strings.Join(why, "\n  "))
}

func (x *Executor) mismatch(v Verification, want stages.VerifyBoardParams, inputs map[string]artifacts.Digest) string {
	if v.Error != "" {
		return v.Error
	}
	if x.Trusted && len(v.TrustedBy) == 0 {
		return "not signed by a trusted key"
	}
	if want.Signer != "" && !slices.Contains(v.TrustedBy, want.Signer) {
		return fmt.Sprintf("not signed by %s (verified signers: %v)", want.Signer, v.TrustedBy)
	}
	got, ins, err := ParamsOf(v.Predicate, v.Report)
	if err != nil {
		return err.Error()
	}
	var diff []string
	for _, f := range []struct{ name, got, want string }{
		{"board", got.Board, want.Board}, {"fingerprint", got.Fingerprint, want.Fingerprint},
		{"program", got.Program, want.Program}, {"command", got.Command, want.Command},
	} {
		if f.got != f.want {
			diff = append(diff, fmt.Sprintf("%s %s, want %s", f.name, f.got, f.want))
		}
	}
	for _, role := range []string{"pack", "stub", "text"} {
		if ins[role] != inputs[role] {
			diff = append(diff, fmt.Sprintf("%s %s, want %s", role, ins[role], inputs[role]))
		}
	}
	return strings.Join(diff, "; ")
}

// adopt stores the attested predicate as the node's output.
func (x *Executor) adopt(ctx context.Context, v Verification) ([]artifacts.NamedObject, error) {
	b, err := json.Marshal(v.Predicate)
	if err != nil {
		return nil, fmt.Errorf("attestation %s: %w", v.Attestation, err)
	}
	tmp, err := x.Store.TempDir(ctx)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	p := filepath.Join(tmp, stages.VerifyBoardOutput)
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	obj, err := x.Store.AdoptFile(ctx, p)
	if err != nil {
		return nil, err
	}
	if x.Logger != nil {
		x.Logger.Info("verify-board satisfied by attestation", "attestation", v.Attestation, "host", v.Host, "ref", x.Ref)
	}
	return []artifacts.NamedObject{{Name: stages.VerifyBoardOutput, Digest: obj.Digest, Size: obj.Size}}, nil
}
