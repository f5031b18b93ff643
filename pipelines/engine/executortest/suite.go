// Package executortest is the conformance suite every engine.Executor must pass: the local
// executor always, the Dagger executor whenever an engine is reachable. It runs real stage kinds
// (the demo kinds, which stream and are cheap) on real files in a real store.
//
// The suite checks that an executor
//
//   - produces, for each node, exactly the outputs (names, digests, sizes) that running the stage
//     in process through stages.Execute produces, and leaves them verified in the store;
//   - fails a failing node with an error that names the stage and the stage's own message;
//   - fails a node whose input file is missing with an error naming the input;
//   - returns promptly with an error wrapping context.Canceled when ctx is canceled mid-run, and
//     leaves no scratch directory behind;
//   - rejects an export that was damaged between the run and the ingest (a flipped byte, a
//     truncated file, a stray file, a result record of another node), wrapping
//     nodeexec.ErrExportMismatch or nodeexec.ErrBadResult, and never stores the good digest
//     from damaged bytes.
//
// Outputs returns the digests a given executor produced for the suite's nodes, so a test can
// assert that two executors agree byte for byte.
//
// Pack (pack.go) runs the real pack stages — tokenize, calibrate, finalize, tile, write-orkpack,
// emit-stub, screen, verify-local, report, provenance — on a real model: the built-in W4A8 recipe
// on stories260K from the shared test data, once in process and once through the executor, and
// requires every node's outputs byte-identical in both stores and every output object to have the
// same data extents (a stub exported by another executor must be as sparse as a local one).
package executortest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/nodeexec"
	"orkpipe/stages"
)

// Factory returns the executor under test on store. beforeIngest, when not nil, must be called
// with the node's output directory (outputs/ + result.json, see package nodeexec) after the run
// and before anything is ingested: it is how the suite damages an export.
type Factory func(t *testing.T, store *artifacts.Store, beforeIngest func(outDir string) error) engine.Executor

// Node is one node of the suite: its request (inputs as real files) and the outputs that
// stages.Execute produces for it in process.
type Node struct {
	Name string
	Req  engine.ExecRequest
	Want []artifacts.NamedObject
}

// Run runs the whole suite against the executors newX makes.
func Run(t *testing.T, newX Factory) {
	t.Run("Outputs", func(t *testing.T) { Outputs(t, newX) })
	t.Run("FailingNode", func(t *testing.T) { testFailingNode(t, newX) })
	t.Run("MissingInput", func(t *testing.T) { testMissingInput(t, newX) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, newX) })
	t.Run("CorruptExport", func(t *testing.T) { testCorruptExport(t, newX) })
}

// RunForwarding runs the suite but its damaged-export cases, for an executor that forwards nodes
// to one in another process (package procexec): the damage is injected by a callback, which cannot
// cross a process boundary; the executor on the other side must pass Run itself. newX is always
// called with a nil beforeIngest.
func RunForwarding(t *testing.T, newX Factory) {
	t.Run("Outputs", func(t *testing.T) { Outputs(t, newX) })
	t.Run("FailingNode", func(t *testing.T) { testFailingNode(t, newX) })
	t.Run("MissingInput", func(t *testing.T) { testMissingInput(t, newX) })
	t.Run("Cancel", func(t *testing.T) { testCancel(t, newX) })
}

// OpenStore opens a fresh store in a test directory, closed at cleanup.
func OpenStore(t *testing.T) *artifacts.Store {
	t.Helper()
	s, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Nodes returns the suite's nodes over source files written to a test directory: a generator
// (no inputs, 1 MiB + 3 bytes), a transform of a source file, and a join whose two inputs are the
// same file (one digest, two names) — each with the outputs stages.Execute gives it.
func Nodes(t *testing.T) []Node {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "source.bin")
	body := []byte(strings.Repeat("orkpipe executor conformance ", 5000))
	if err := os.WriteFile(src, body, 0o444); err != nil {
		t.Fatal(err)
	}
	f := stages.File{Path: src, Digest: artifacts.SumBytes(body), Size: int64(len(body))}
	nodes := []Node{
		{Name: "generate", Req: request(t, "demo-generate", `{"seed":42,"size":1048579}`, nil)},
		{Name: "xor", Req: request(t, "demo-xor", `{"key":90}`, map[string]stages.File{"in": f})},
		{Name: "join-same-file", Req: request(t, "demo-join", `{}`, map[string]stages.File{"a": f, "b": f})},
	}
	for i := range nodes {
		nodes[i].Want = reference(t, nodes[i].Req)
	}
	return nodes
}

// Outputs runs every node of Nodes through the executor and asserts that each produced exactly
// the in-process outputs, stored and verified. It returns the outputs by node name.
func Outputs(t *testing.T, newX Factory) map[string][]artifacts.NamedObject {
	ctx := context.Background()
	store := OpenStore(t)
	x := newX(t, store, nil)
	got := map[string][]artifacts.NamedObject{}
	for _, n := range Nodes(t) {
		outs, err := x.Execute(ctx, n.Req)
		if err != nil {
			t.Fatalf("node %s (%s): %v", n.Name, n.Req.Material.Stage, err)
		}
		if !sameObjects(outs, n.Want) {
			t.Errorf("node %s: outputs %v, in process %v", n.Name, outs, n.Want)
		}
		for _, o := range outs {
			if err := store.Verify(ctx, o.Digest); err != nil {
				t.Errorf("node %s output %s: %v", n.Name, o.Name, err)
			}
		}
		got[n.Name] = outs
	}
	return got
}

func testFailingNode(t *testing.T, newX Factory) {
	store := OpenStore(t)
	// A params object that decodes but fails the stage's validation at run time.
	req := request(t, "demo-rotate", `{"bits":1}`, map[string]stages.File{"in": writeFile(t, "abc")})
	req.Material.Params = []byte(`{"bits":9}`)
	req.Key = mustKey(t, req.Material)
	_, err := newX(t, store, nil).Execute(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "demo-rotate") || !strings.Contains(err.Error(), `"bits": 9, want 1..7`) {
		t.Fatalf("failing node: err %v, want an error naming stage demo-rotate and its message", err)
	}
}

func testMissingInput(t *testing.T, newX Factory) {
	store := OpenStore(t)
	f := writeFile(t, "gone")
	req := request(t, "demo-xor", `{"key":1}`, map[string]stages.File{"in": f})
	if err := os.Remove(f.Path); err != nil {
		t.Fatal(err)
	}
	_, err := newX(t, store, nil).Execute(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), f.Digest.Hex()) && !strings.Contains(err.Error(), f.Path) {
		t.Fatalf("missing input: err %v, want an error naming %s or %s", err, f.Path, f.Digest)
	}
}

func testCancel(t *testing.T, newX Factory) {
	store := OpenStore(t)
	// 4 GiB: far longer than the cancellation delay, small enough not to fill a disk if ignored.
	req := request(t, "demo-generate", `{"seed":7,"size":4294967296}`, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() {
		_, err := newX(t, store, nil).Execute(ctx, req)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled node: err %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the executor did not return within 2 minutes of the cancellation")
	}
	tmp, err := store.TempDir(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Dir(tmp))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("scratch left behind after cancellation: %v", names)
	}
}

func testCorruptExport(t *testing.T, newX Factory) {
	ctx := context.Background()
	n := Nodes(t)[1] // xor: one output
	out := n.Want[0]
	outPath := func(dir string) string { return filepath.Join(dir, nodeexec.OutputsDir, out.Name) }
	for _, tc := range []struct {
		name   string
		damage func(dir string) error
		wantIs error
	}{
		{"flipped byte", func(dir string) error {
			f, err := os.OpenFile(outPath(dir), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, out.Size/2); err != nil {
				return err
			}
			b[0] ^= 0x80
			_, err = f.WriteAt(b, out.Size/2)
			return err
		}, nodeexec.ErrExportMismatch},
		{"truncated", func(dir string) error { return os.Truncate(outPath(dir), out.Size-1) }, nodeexec.ErrExportMismatch},
		{"stray file", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, nodeexec.OutputsDir, "stray"), []byte("x"), 0o644)
		}, nodeexec.ErrExportMismatch},
		{"record of another node", func(dir string) error {
			p := filepath.Join(dir, nodeexec.ResultFile)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, []byte(strings.Replace(string(b), n.Req.Key.String(), artifacts.SumBytes(nil).String(), 1)), 0o644)
		}, nodeexec.ErrBadResult},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := OpenStore(t)
			called := false
			x := newX(t, store, func(dir string) error { called = true; return tc.damage(dir) })
			outs, err := x.Execute(ctx, n.Req)
			if !called {
				t.Fatalf("the executor never called beforeIngest (err %v)", err)
			}
			if !errors.Is(err, tc.wantIs) {
				t.Fatalf("damaged export accepted or misreported: outputs %v, err %v, want %v", outs, err, tc.wantIs)
			}
			if _, err := store.Stat(ctx, out.Digest); !errors.Is(err, artifacts.ErrNotFound) {
				t.Errorf("the good digest %s is in the store although its bytes were damaged: %v", out.Digest, err)
			}
		})
	}
}
