package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/demo"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/nodeexec"
	"orkpipe/pipelines/recipe"
	"orkpipe/stages"
)

// nodeExecChecker is an engine.Executor that runs every node through the local executor and then
// again through `orkpipe node exec` (the CLI, in process), and compares the two byte for byte.
type nodeExecChecker struct {
	t     *testing.T
	store *artifacts.Store
	local engine.Local

	mu    sync.Mutex // one CLI run at a time (the root command sets the default logger)
	kinds map[string]int
}

func (c *nodeExecChecker) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	outs, err := c.local.Execute(ctx, req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.viaCLI(ctx, req, outs); err != nil {
		c.t.Errorf("stage %q (key %s): %v", req.Material.Stage, req.Key, err)
	}
	c.kinds[req.Material.Stage]++
	return outs, nil
}

// viaCLI runs req through `orkpipe node exec` and compares its outputs with the local ones.
func (c *nodeExecChecker) viaCLI(ctx context.Context, req engine.ExecRequest, local []artifacts.NamedObject) error {
	dir := c.t.TempDir()
	in, out, mf := filepath.Join(dir, "in"), filepath.Join(dir, "out"), filepath.Join(dir, "material.json")
	if err := engine.LinkInputs(in, req); err != nil {
		return err
	}
	material, err := req.Material.Canonical()
	if err != nil {
		return err
	}
	if err := os.WriteFile(mf, material, 0o444); err != nil {
		return err
	}
	stdout, err := runCLI(c.t, "--json", "node", "exec", "--key", req.Key.String(), "--material", mf, "--inputs", in, "-o", out)
	if err != nil {
		return fmt.Errorf("node exec: %v\n%s", err, stdout)
	}
	var res nodeexec.Result
	if err := json.Unmarshal([]byte(lastLine(stdout)), &res); err != nil {
		return fmt.Errorf("node exec --json output %q: %v", stdout, err)
	}
	if len(res.Outputs) != len(local) {
		return fmt.Errorf("node exec produced %v, local %v", res.Outputs, local)
	}
	for i, o := range local {
		if res.Outputs[i] != o {
			return fmt.Errorf("output %d: node exec %v, local %v", i, res.Outputs[i], o)
		}
		if err := sameBytes(ctx, c.store, o.Digest, filepath.Join(out, nodeexec.OutputsDir, o.Name)); err != nil {
			return fmt.Errorf("output %q: %v", o.Name, err)
		}
	}
	return nil
}

// sameBytes compares the stored object d with the file at path, byte for byte.
func sameBytes(ctx context.Context, store *artifacts.Store, d artifacts.Digest, path string) error {
	obj, err := store.Open(ctx, d)
	if err != nil {
		return err
	}
	defer obj.Close()
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	a, b := bufio.NewReaderSize(obj, 1<<20), bufio.NewReaderSize(f, 1<<20)
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	for off := int64(0); ; {
		na, ea := io.ReadFull(a, bufA)
		nb, eb := io.ReadFull(b, bufB)
		if na != nb || !bytes.Equal(bufA[:na], bufB[:nb]) {
			return fmt.Errorf("differs from the local output within bytes %d..%d", off, off+int64(max(na, nb)))
		}
		off += int64(na)
		endA := ea == io.EOF || ea == io.ErrUnexpectedEOF
		endB := eb == io.EOF || eb == io.ErrUnexpectedEOF
		if endA && endB {
			return nil
		}
		if ea != nil && !endA {
			return ea
		}
		if eb != nil && !endB {
			return eb
		}
		if endA != endB {
			return fmt.Errorf("lengths differ after %d bytes", off)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestNodeExecReproducesLocal builds the demo target and the README's demo recipe with every node
// checked against `orkpipe node exec`, and requires that together they exercise every registered
// stage kind.
func TestNodeExecReproducesLocal(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "builds the demo recipe twice over")
	}
	ctx := context.Background()
	store, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	checker := &nodeExecChecker{t: t, store: store, local: engine.Local{Store: store}, kinds: map[string]int{}}
	const mem = 4 << 30
	eng, err := engine.New(store, engine.WithExecutor(checker), engine.WithJobs(2), engine.WithMemoryBudget(mem))
	if err != nil {
		t.Fatal(err)
	}
	dt := demo.New()
	dt.Size = 300 << 10
	r, err := recipe.Load(filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := build.New(r, build.WithMemoryBudget(mem))
	if err != nil {
		t.Fatal(err)
	}
	// The demo recipe on a synthetic source, for the synth stage, with an activation-clip search (the
	// act-clip stage) on its first scheme, and its second scheme RTN calibrated one-shot (the rtn-tile
	// stage).
	sr, err := recipe.Load(filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml"),
		"source={synth: {layers: 1, n_embd: 64, n_ff: 96, n_head: 4, n_head_kv: 2, vocab: 360, ctx: 64, type: F16, seed: 1}}", "name=demo-synth",
		"schemes.0.act_clip=search", "schemes.1.method=rtn", "calibration.mode=oneshot")
	if err != nil {
		t.Fatal(err)
	}
	st, err := build.New(sr, build.WithMemoryBudget(mem))
	if err != nil {
		t.Fatal(err)
	}
	// The demo recipe on a synthetic MoE source with its experts packed by RTN and their residency
	// planned: the routing, route and residency stages.
	mr, err := recipe.Load(filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml"),
		"source={synth: {layers: 2, n_embd: 64, n_ff: 96, n_head: 4, n_head_kv: 2, vocab: 360, ctx: 64, type: F16, seed: 1, n_expert: 4, n_expert_used: 2, router_skew: 1}}",
		"name=demo-moe", `schemes.2={match: 'blk\.\d+\.ffn_\w+_exps\.weight', method: rtn, dtype: I8}`, "residency={budget: 50%}", "screen.gates.max_ppl_ratio=0")
	if err != nil {
		t.Fatal(err)
	}
	mt, err := build.New(mr, build.WithMemoryBudget(mem))
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []engine.Target{dt, rt, st, mt} {
		g, err := target.Graph(ctx)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := eng.Plan(g)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Build(ctx, target.Name(), plan, engine.BuildOptions{OutDir: t.TempDir()}); err != nil {
			t.Fatalf("building %s: %v", target.Name(), err)
		}
	}
	var missing []string
	for _, k := range stages.Names() {
		// verify-board (registered only where a graph needs it) is evidence from a board, served
		// from the registry; run anywhere, it fails by design with stages.ErrBoardEvidence.
		if k == stages.VerifyBoard.Name() {
			continue
		}
		if checker.kinds[k] == 0 {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("stage kinds no test build exercised (add a build that runs them): %v", missing)
	}
	t.Logf("nodes checked per stage kind: %v", checker.kinds)
}

func TestNodeExecRefuses(t *testing.T) {
	dir := t.TempDir()
	m := stages.KeyMaterial{Stage: "demo-xor", Version: 1, Params: []byte(`{"key":1}`), Inputs: map[string]artifacts.Digest{"in": artifacts.SumBytes([]byte("x"))}}
	b, _ := m.Canonical()
	mf := filepath.Join(dir, "m.json")
	os.WriteFile(mf, b, 0o444)
	key, _ := m.Key()
	for _, tc := range []struct {
		name string
		args []string
		want string
		ue   bool
	}{
		{"no key", []string{"--material", mf, "--inputs", dir, "-o", filepath.Join(dir, "o1")}, "--key is required", true},
		{"bad key", []string{"--key", "md5:x", "--material", mf, "--inputs", dir, "-o", filepath.Join(dir, "o2")}, "--key", true},
		{"other key", []string{"--key", artifacts.SumBytes(nil).String(), "--material", mf, "--inputs", dir, "-o", filepath.Join(dir, "o3")}, "hashes to " + key.String(), false},
		{"missing input", []string{"--key", key.String(), "--material", mf, "--inputs", dir, "-o", filepath.Join(dir, "o4")}, m.Inputs["in"].String(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, append([]string{"node", "exec"}, tc.args...)...)
			var ue usageError
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &ue) != tc.ue {
				t.Fatalf("err %v (usage error: %v), want one mentioning %q\n%s", err, errors.As(err, &ue), tc.want, out)
			}
		})
	}
}
