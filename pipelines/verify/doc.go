// Package verify is `orkpipe verify`: the step between pulling a pack onto an RK3588 board host and
// handing it to the NPU runtime. It composes finished parts — ork/pack, ork/gguf, ork/board,
// ork/boardhost and registry — into one report and, optionally, a signed attestation.
//
// # What is checked (check names as they appear in the report)
//
// A build directory holds exactly one <name>.orkpack, its stub <name>.orkpack.gguf, report.json and
// provenance.json (an in-toto Statement v1 whose subjects carry sha256 and BLAKE3 digests).
//
//   - "integrity": every subject of provenance.json exists and has the recorded sha256 (and BLAKE3
//     where recorded); the pack, the stub and report.json must be subjects.
//   - "stub-header": the stub's header region (GGUF header, KV and tensor infos) hashes to the
//     source header recorded at build time: report.json field verify.stub_header, which the build's
//     verify-local node checked against the source model.
//   - "pack": header, footer and index validate (pack.Open) and every entry's bytes match its BLAKE3.
//   - "loader-coverage": every entry decodes through its dtype's untiler (the loader's walk), codes
//     are in the quantizer's range (int4 -8..7, int8 -127..127), scales are finite and every padding
//     byte is zero.
//   - "stub": no tensor the pack does not own is all zero and every owned tensor is a hole/zero
//     (gguf.VerifyStub against the pack's entries, experts folded into their tensor).
//   - "fit": the domain plan fits the board profile (board.PlanDomains) and the plan stored in the
//     pack equals the one recomputed on it (board.CheckPlan).
//   - "fingerprint": the host (boardhost.Collect), with the run program's closure when there is one.
//   - "inputs-unchanged", "run": the guarded run (boardhost.Run). The command is not started when
//     any check before it failed: a runtime is never handed a pack that did not verify.
//
// Every check runs even when an earlier one failed (except the run), so a report names every problem.
// Everything streams: the integrity check reads each file once (sha256 and BLAKE3 together, the
// stub's holes as zeros, since its digests cover them), the pack check holds one entry at a time, the
// stub check skips holes (SEEK_DATA/SEEK_HOLE) and reads only the non-owned tensors' data.
//
// # Attestation
//
// Attest pushes the report as a signed referrer of the pack's manifest (registry.Attach) with
// predicate type PredicateType; the predicate is a Predicate: the board profile's name and digest and
// the report. Verifications lists them from a registry.Description for `describe`.
//
// # In the DAG
//
// A "verify-board" node (stages.VerifyBoard, registered by RegisterKind) is keyed by the pack, stub
// and text digests, the board profile name, the host fingerprint digest, the run program digest and
// the command template (stages.VerifyBoardParams). It can only be satisfied by evidence from the
// board: Executor serves it from a matching attestation found in the registry (the attested
// predicate becomes its output and the engine records it, so the next build is a cache hit), and the
// build side never runs it (the stage's own run fails with stages.ErrBoardEvidence). ParamsOf gives
// the parameters a verification proves, for a recipe to require.
package verify
