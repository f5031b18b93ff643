package verify_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/verify"
	"orkpipe/pipelines/verify/verifytest"
	"orkpipe/registry"
	"orkpipe/registry/regtest"
	"orkpipe/stages"
)

// countingExecutor counts the nodes that reached the local executor.
type countingExecutor struct {
	next engine.Executor
	n    atomic.Int32
}

func (c *countingExecutor) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	c.n.Add(1)
	return c.next.Execute(ctx, req)
}

// boardKey generates a board's signing key pair.
func boardKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	keyPath := filepath.Join(t.TempDir(), "board.key")
	pub, err := registry.GenerateKeyFiles(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := registry.LoadPrivateKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// boardEngine opens a fresh store and an engine whose verify-board nodes go through a trusting
// verify.Executor on ref (key pub) before local, which counts the nodes that reached it.
func boardEngine(t *testing.T, ref string, plain registry.Option, pub ed25519.PublicKey) (*countingExecutor, *verify.Executor, *engine.Engine) {
	t.Helper()
	store, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	local := &countingExecutor{next: engine.Local{Store: store}}
	exec := &verify.Executor{Next: local, Store: store, Ref: ref, Options: []registry.Option{plain, registry.WithTrust(pub)}, Trusted: true}
	eng, err := engine.New(store, engine.WithMemoryBudget(1<<30), engine.WithExecutor(exec))
	if err != nil {
		t.Fatal(err)
	}
	return local, exec, eng
}

// elsewhereExecutor stands in for an executor that runs nodes outside this process (Dagger): it
// runs them locally and reports them as run on host.
type elsewhereExecutor struct {
	next engine.Executor
	host string
	n    atomic.Int32
}

func (e *elsewhereExecutor) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	outs, _, err := e.ExecuteProvenance(ctx, req)
	return outs, err
}

func (e *elsewhereExecutor) ExecuteProvenance(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, artifacts.Provenance, error) {
	e.n.Add(1)
	outs, err := e.next.Execute(ctx, req)
	return outs, artifacts.Provenance{Host: e.host}, err
}

// Acceptance 5: push a build to a real registry (distribution/v3 in-process), pull and verify it with a
// run, attest the report; describe lists the verification with its board host and binaries; a graph
// requiring that board verification finds the attestation and runs nothing, twice (the second time
// from the action cache); a requirement no attestation matches fails naming the difference.
func TestVerifyAttestDescribeAndDAG(t *testing.T) {
	ctx := context.Background()
	verify.RegisterKind()
	reg := regtest.Start(t, nil)
	ref := reg.Ref("packs/stories", "v1")
	plain := registry.WithPlainHTTP(reg.Host)

	build := t.TempDir()
	verifytest.BuildDir(t, build)
	if _, err := registry.Push(ctx, build, ref, plain); err != nil {
		t.Fatal(err)
	}

	// The board host: pull (every part verified), verify with a run, attest.
	board := t.TempDir()
	if _, err := registry.Pull(ctx, ref, board, plain); err != nil {
		t.Fatal(err)
	}
	text := testfiles.Path(t, "tinystories_sample.txt")
	command := "'" + verifytest.StandIn(t, "good") + "' -m {stub} --ork-pack {pack} -f {text}"
	res, err := verify.Dir(ctx, board, verify.WithRun(command, text))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.OK() {
		t.Fatalf("verification of the pulled pack failed: %+v", res.Report.Checks)
	}
	pub, priv := boardKey(t)
	att, err := verify.Attest(ctx, ref, res, plain, registry.WithSigner(priv))
	if err != nil {
		t.Fatal(err)
	}
	// A verification of another pack is never attached to this artifact.
	otherDir := t.TempDir()
	verifytest.BuildDirWith(t, otherDir, func(w *pack.Weight) bool { w.Scales[0] *= 2; return true })
	otherRes, err := verify.Dir(ctx, otherDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verify.Attest(ctx, ref, otherRes, plain, registry.WithSigner(priv)); err == nil || !strings.Contains(err.Error(), "stories.orkpack is blake3:") {
		t.Fatalf("attesting another pack's verification: err = %v", err)
	}

	// The build side: describe lists the verification, which host and which binaries.
	d, err := registry.Describe(ctx, ref, plain, registry.WithTrust(pub))
	if err != nil {
		t.Fatal(err)
	}
	vs := verify.Verifications(d)
	if len(vs) != 1 || vs[0].Attestation != att || !vs[0].OK || len(vs[0].TrustedBy) != 1 || vs[0].Error != "" {
		t.Fatalf("verifications %+v, want the one attested (%s), ok and trusted", vs, att)
	}
	v := vs[0]
	host, _ := os.Hostname()
	if v.Host != host || v.Board != "rk3588" || v.Fingerprint != res.Report.Fingerprint.Digest() || v.PPL != 2.6798 {
		t.Errorf("verification %+v: want host %s, board rk3588, the report's fingerprint and PPL", v, host)
	}
	var sawScript, sawShell bool
	for _, o := range v.Objects {
		sawScript = sawScript || strings.HasSuffix(o.Path, "fake-llama-perplexity-good.sh") && strings.HasPrefix(o.Digest, "blake3:")
		sawShell = sawShell || o.Role == "script-interpreter" && strings.HasPrefix(o.Digest, "blake3:")
	}
	if !sawScript || !sawShell {
		t.Errorf("objects %+v: want the run script and its interpreter with digests", v.Objects)
	}

	// A graph requiring this board verification.
	params, inputs, err := verify.ParamsOf(v.Predicate, v.Report)
	if err != nil {
		t.Fatal(err)
	}
	if inputs["pack"] != fileDigest(t, d, verifytest.Name+".orkpack") {
		t.Fatalf("attested pack %s is not the pushed one", inputs["pack"])
	}
	local, exec, eng := boardEngine(t, ref, plain, pub)
	// boardGraph is the graph of one verify-board node on the pushed build's pack and stub.
	boardGraph := func(p stages.VerifyBoardParams) *engine.Graph {
		g := engine.NewGraph()
		n := g.Add("verify-board", "verify-board", p, map[string]engine.Input{
			"pack": engine.File(filepath.Join(build, verifytest.Name+".orkpack")),
			"stub": engine.File(filepath.Join(build, verifytest.Name+".orkpack.gguf")),
			"text": engine.File(text),
		})
		g.Export(stages.VerifyBoardOutput, n.Output(stages.VerifyBoardOutput))
		return g
	}
	graph := func(p stages.VerifyBoardParams) *engine.Plan {
		pl, err := eng.Plan(boardGraph(p))
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}
	for i, want := range []struct{ executed, cached int }{{1, 0}, {0, 1}} {
		r, err := eng.Build(ctx, "stories-board", graph(params), engine.BuildOptions{})
		if err != nil {
			t.Fatalf("build %d: %v", i, err)
		}
		if r.Executed != want.executed || r.Cached != want.cached {
			t.Errorf("build %d: executed %d cached %d, want %d and %d", i, r.Executed, r.Cached, want.executed, want.cached)
		}
	}
	if n := local.n.Load(); n != 0 {
		t.Errorf("%d nodes reached the local executor: the board verification was run, not found", n)
	}

	// Under an executor that runs nodes elsewhere (engine.ProvenanceExecutor: --executor dagger), the
	// board verification is still found here, and the other nodes keep where they ran.
	store3, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store3.Close()
	remote := &elsewhereExecutor{next: engine.Local{Store: store3}, host: "container-7"}
	exec3 := &verify.Executor{Next: remote, Store: store3, Ref: ref, Options: []registry.Option{plain, registry.WithTrust(pub)}, Trusted: true}
	if _, ok := exec3.Engine().(engine.ProvenanceExecutor); !ok {
		t.Fatal("Engine() over a ProvenanceExecutor is not one")
	}
	if _, ok := exec.Engine().(engine.ProvenanceExecutor); ok {
		t.Fatal("Engine() over a local executor claims remote provenance")
	}
	eng3, err := engine.New(store3, engine.WithMemoryBudget(1<<30), engine.WithExecutor(exec3.Engine()))
	if err != nil {
		t.Fatal(err)
	}
	g3 := boardGraph(params)
	gen := g3.Add("gen", "demo-generate", stages.DemoGenerateParams{Seed: 3, Size: 4096}, nil)
	g3.Export("data", gen.Output("data"))
	pl3, err := eng3.Plan(g3)
	if err != nil {
		t.Fatal(err)
	}
	r3, err := eng3.Build(ctx, "stories-board-elsewhere", pl3, engine.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r3.Executed != 2 || remote.n.Load() != 1 {
		t.Fatalf("executed %d, %d on the remote executor: want both nodes run, only gen remotely", r3.Executed, remote.n.Load())
	}
	for _, nr := range r3.Nodes {
		rec, err := store3.GetAction(ctx, nr.Key)
		if err != nil {
			t.Fatal(err)
		}
		want := host
		if nr.Stage == "demo-generate" {
			want = remote.host
		}
		if rec.Provenance.Host != want {
			t.Errorf("node %s: recorded host %q, want %q", nr.ID, rec.Provenance.Host, want)
		}
	}

	// With only another key trusted, the attestation does not count (fresh store: no cached record).
	pub2, err := registry.GenerateKeyFiles(filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	store2, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store2.Close()
	exec2 := &verify.Executor{Next: local, Store: store2, Ref: ref, Options: []registry.Option{plain, registry.WithTrust(pub2)}, Trusted: true}
	eng2, err := engine.New(store2, engine.WithMemoryBudget(1<<30), engine.WithExecutor(exec2))
	if err != nil {
		t.Fatal(err)
	}
	pl2, err := eng2.Plan(boardGraph(params))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng2.Build(ctx, "stories-board", pl2, engine.BuildOptions{}); !errors.Is(err, verify.ErrNotSatisfied) || !strings.Contains(err.Error(), "trusted key") {
		t.Fatalf("untrusted attestation: err = %v, want ErrNotSatisfied about the trusted key", err)
	}

	// Another board host (fingerprint) is not satisfied by this attestation.
	other := params
	other.Fingerprint = artifacts.SumBytes([]byte("another board")).String()
	_, err = eng.Build(ctx, "stories-other-board", graph(other), engine.BuildOptions{})
	if !errors.Is(err, verify.ErrNotSatisfied) || !strings.Contains(err.Error(), "fingerprint "+params.Fingerprint+", want "+other.Fingerprint) {
		t.Fatalf("err = %v, want ErrNotSatisfied naming the fingerprint", err)
	}
}

func fileDigest(t *testing.T, d *registry.Description, name string) artifacts.Digest {
	t.Helper()
	f, ok := d.Artifact.File(name)
	if !ok {
		t.Fatalf("artifact has no %s", name)
	}
	return f.Digests.BLAKE3
}

// TestBoardVerificationAfterDecoys: a board verification listed after more attestations of other
// predicate types than Describe fetches (70 decoys before it in the referrers index) is still found by
// the Executor: the verify-board node is satisfied from the registry, nothing runs locally.
func TestBoardVerificationAfterDecoys(t *testing.T) {
	ctx := context.Background()
	verify.RegisterKind()
	reg := regtest.Start(t, nil)
	const repo = "packs/decoys"
	ref := reg.Ref(repo, "v1")
	plain := registry.WithPlainHTTP(reg.Host)
	build := t.TempDir()
	verifytest.BuildDir(t, build)
	pushed, err := registry.Push(ctx, build, ref, plain)
	if err != nil {
		t.Fatal(err)
	}
	text := testfiles.Path(t, "tinystories_sample.txt")
	res, err := verify.Dir(ctx, build, verify.WithRun("'"+verifytest.StandIn(t, "good")+"' -m {stub} --ork-pack {pack} -f {text}", text))
	if err != nil {
		t.Fatal(err)
	}
	pub, priv := boardKey(t)
	att, err := verify.Attest(ctx, ref, res, plain, registry.WithSigner(priv))
	if err != nil {
		t.Fatal(err)
	}
	const decoys = 70
	verifytest.AttachDecoys(t, ref, decoys, plain, registry.WithSigner(priv))
	if n := reg.MoveReferrerLast(t, repo, pushed.Artifact.Digest.String(), att); n != decoys {
		t.Fatalf("%d referrers listed before the board verification, want %d", n, decoys)
	}
	d, err := registry.Describe(ctx, ref, plain, registry.WithTrust(pub))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := verify.NewPredicate(res)
	if err != nil {
		t.Fatal(err)
	}
	pred, rep, err := verify.DecodePredicate(raw)
	if err != nil {
		t.Fatal(err)
	}
	params, inputs, err := verify.ParamsOf(pred, rep)
	if err != nil {
		t.Fatal(err)
	}
	if inputs["pack"] != fileDigest(t, d, verifytest.Name+".orkpack") {
		t.Fatalf("verified pack %s is not the pushed one", inputs["pack"])
	}
	local, _, eng := boardEngine(t, ref, plain, pub)
	g := engine.NewGraph()
	n := g.Add("verify-board", "verify-board", params, map[string]engine.Input{
		"pack": engine.File(filepath.Join(build, verifytest.Name+".orkpack")),
		"stub": engine.File(filepath.Join(build, verifytest.Name+".orkpack.gguf")),
		"text": engine.File(text),
	})
	g.Export(stages.VerifyBoardOutput, n.Output(stages.VerifyBoardOutput))
	pl, err := eng.Plan(g)
	if err != nil {
		t.Fatal(err)
	}
	r, err := eng.Build(ctx, "stories-board", pl, engine.BuildOptions{})
	if err != nil {
		t.Fatalf("board verification listed after %d decoys: %v", decoys, err)
	}
	if r.Executed != 1 || local.n.Load() != 0 {
		t.Errorf("executed %d, %d on the local executor: want the verification adopted from the registry", r.Executed, local.n.Load())
	}
}
