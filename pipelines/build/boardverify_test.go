package build_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/recipe"
	"orkpipe/pipelines/verify"
	"orkpipe/registry"
	"orkpipe/stages"
)

func boardVerifySets(t *testing.T) []string {
	t.Helper()
	key := filepath.Join(t.TempDir(), "board.key")
	if _, err := registry.GenerateKeyFiles(key); err != nil {
		t.Fatal(err)
	}
	key += ".pub"
	return []string{
		"board_verify.ref=registry.example.com/packs/tiny:v1",
		"board_verify.command=llama-perplexity -m {stub} --ork-pack {pack} -f {text}",
		"board_verify.fingerprint=" + artifacts.SumBytes([]byte("board host")).String(),
		"board_verify.program=" + artifacts.SumBytes([]byte("runtime")).String(),
		"board_verify.trust=" + key,
	}
}

// The planner adds one verify-board node on the build's own pack and stub and the requirement's
// text, with exactly the parameters an attestation proves, and exports its evidence; without
// board_verify there is no such node.
func TestPlanBoardVerify(t *testing.T) {
	ctx := context.Background()
	path := writeRecipe(t, "oneshot")
	sets := boardVerifySets(t)
	rec, err := recipe.Load(path, sets...)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := build.New(rec, build.WithMemoryBudget(2<<30))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stages.Lookup("verify-board"); err != nil {
		if _, err := tg.Graph(ctx); !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), "RegisterKind") {
			t.Errorf("planning with the kind unregistered: err = %v, want ErrPlan naming RegisterKind", err)
		}
	}
	verify.RegisterKind()
	g, err := tg.Graph(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := g.Node("verify-board")
	if n == nil || n.Stage() != "verify-board" {
		t.Fatalf("no verify-board node in %v", nodeIDs(g))
	}
	exported := false
	for _, e := range g.Exports() {
		exported = exported || e.Name == build.BoardVerifyOutput && e.From == n.Output(stages.VerifyBoardOutput)
	}
	if !exported {
		t.Errorf("exports %+v: want %s from verify-board", g.Exports(), build.BoardVerifyOutput)
	}
	if tg.Roles()[build.BoardVerifyOutput] != "board-verify" {
		t.Errorf("roles %v: want board-verify.json as role board-verify", tg.Roles())
	}

	plain, err := recipe.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tp, _ := build.New(plain, build.WithMemoryBudget(2<<30))
	gp, err := tp.Graph(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gp.Node("verify-board") != nil || len(nodeIDs(gp)) != len(nodeIDs(g))-1 {
		t.Errorf("without board_verify: nodes %v", nodeIDs(gp))
	}

	missing, err := recipe.Load(path, append(sets, "board_verify.text=/nonexistent/wiki.txt")...)
	if err != nil {
		t.Fatal(err)
	}
	tm, _ := build.New(missing, build.WithMemoryBudget(2<<30))
	if _, err := tm.Graph(ctx); !errors.Is(err, build.ErrPlan) || !strings.Contains(err.Error(), "board_verify.text") || !strings.Contains(err.Error(), "/nonexistent/wiki.txt") {
		t.Errorf("missing board_verify.text: err = %v", err)
	}
}

// recorder passes every node to the local executor and records the verify-board request and the
// outputs of write-orkpack and emit-stub (it is not a double: every node really runs).
type recorder struct {
	next    engine.Executor
	mu      sync.Mutex
	verify  *engine.ExecRequest
	outputs map[string]artifacts.Digest
}

func (x *recorder) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	outs, err := x.next.Execute(ctx, req)
	x.mu.Lock()
	defer x.mu.Unlock()
	if req.Material.Stage == "verify-board" {
		x.verify = &req
	}
	for _, o := range outs {
		x.outputs[req.Material.Stage+"/"+o.Name] = o.Digest
	}
	return outs, err
}

// Built with the plain local executor (no attestation source), the requirement is never run on the
// build host nor skipped: the build fails with stages.ErrBoardEvidence saying how to get one, and
// the output directory gets nothing. The node's key material is exactly what an attestation
// proves: the requirement's board, command, fingerprint and program, and the digests of the
// build's own pack and stub and of the text.
func TestBuildBoardVerifyWithoutAttestationFails(t *testing.T) {
	verify.RegisterKind()
	store, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rec := &recorder{next: engine.Local{Store: store}, outputs: map[string]artifacts.Digest{}}
	eng, err := engine.New(store, engine.WithJobs(2), engine.WithMemoryBudget(2<<30), engine.WithExecutor(rec))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{store: store, eng: eng}
	out := filepath.Join(t.TempDir(), "out")
	sets := boardVerifySets(t)
	ran, _, err := r.build(t, writeRecipe(t, "oneshot"), out, sets...)
	if !errors.Is(err, stages.ErrBoardEvidence) || !strings.Contains(err.Error(), "orkpipe verify REF --board rk3588") {
		t.Fatalf("err = %v, want ErrBoardEvidence with what to run on the board", err)
	}
	for _, id := range ran {
		if id == "verify-board" {
			t.Errorf("verify-board counted as executed: %v", ran)
		}
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("output directory has %d entries after a failed build", len(ents))
	}
	if rec.verify == nil {
		t.Fatal("verify-board never reached the executor")
	}
	m := rec.verify.Material
	var p stages.VerifyBoardParams
	if err := json.Unmarshal(m.Params, &p); err != nil {
		t.Fatal(err)
	}
	pub, err := registry.LoadPublicKey(strings.TrimPrefix(sets[len(sets)-1], "board_verify.trust="))
	if err != nil {
		t.Fatal(err)
	}
	want := stages.VerifyBoardParams{Board: "rk3588", Command: "llama-perplexity -m {stub} --ork-pack {pack} -f {text}",
		Fingerprint: artifacts.SumBytes([]byte("board host")).String(), Program: artifacts.SumBytes([]byte("runtime")).String(),
		Signer: registry.KeyID(pub)}
	if p != want {
		t.Errorf("params %+v, want %+v", p, want)
	}
	textBytes, err := os.ReadFile(abs(t, "../recipes/demo-eval.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Inputs["pack"] != rec.outputs["write-orkpack/pack"] || m.Inputs["stub"] != rec.outputs["emit-stub/stub.gguf"] ||
		m.Inputs["text"] != artifacts.SumBytes(textBytes) || len(m.Inputs) != 3 || len(m.Tools) != 0 {
		t.Errorf("inputs %v tools %v: want the build's pack %s and stub %s and the text", m.Inputs, m.Tools,
			rec.outputs["write-orkpack/pack"], rec.outputs["emit-stub/stub.gguf"])
	}
}
