package demo_test

import (
	"context"
	"encoding/json"
	"math/bits"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/demo"
	"orkpipe/pipelines/engine"
)

// TestDemoOutputs builds the demo on a real store and checks its result against its definition:
// demo.bin = rotl3(gen-a xor 0x5a) followed by gen-b, and demo.json lists both parts.
func TestDemoOutputs(t *testing.T) {
	ctx := context.Background()
	s, err := artifacts.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e, err := engine.New(s, engine.WithJobs(2), engine.WithMemoryBudget(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	target := demo.Target{Seed: 9, Size: 100_000}
	g, err := target.Graph(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Plan(g)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := e.Build(ctx, target.Name(), p, engine.BuildOptions{OutDir: out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Executed != 5 {
		t.Fatalf("executed %d, want 5", res.Executed)
	}
	read := func(id string) []byte {
		for _, n := range res.Nodes {
			if n.ID == id {
				rec, err := s.GetAction(ctx, n.Key)
				if err != nil {
					t.Fatal(err)
				}
				path, err := s.Path(ctx, rec.Outputs[0].Digest)
				if err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		}
		t.Fatalf("no node %s", id)
		return nil
	}
	a, b := read("gen-a"), read("gen-b")
	if len(a) != 100_000 || len(b) != 100_000 || string(a) == string(b) {
		t.Fatalf("generators: %d and %d bytes (equal: %t)", len(a), len(b), string(a) == string(b))
	}
	got, err := os.ReadFile(filepath.Join(out, "demo.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 200_000 {
		t.Fatalf("demo.bin has %d bytes, want 200000", len(got))
	}
	for i := range a {
		if want := bits.RotateLeft8(a[i]^0x5a, 3); got[i] != want {
			t.Fatalf("demo.bin[%d] = %#x, want rotl3(%#x ^ 0x5a) = %#x", i, got[i], a[i], want)
		}
	}
	if string(got[100_000:]) != string(b) {
		t.Fatal("second half of demo.bin is not gen-b")
	}
	var manifest struct {
		Parts []struct {
			Name, Digest string
			Size         int64
		}
		Size int64
	}
	mb, err := os.ReadFile(filepath.Join(out, "demo.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mb, &manifest); err != nil || manifest.Size != 200_000 || len(manifest.Parts) != 2 ||
		manifest.Parts[1].Digest != artifacts.SumBytes(b).String() {
		t.Errorf("demo.json: %v %+v", err, manifest)
	}
}
