package engine_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
)

// TestRecordedInputs: the build history gives each recorded node key the digests its node read (the
// outputs of the nodes wired to it; none for a node without inputs), across targets; a record file
// that does not decode, and a node whose material does not hash to its key, are left out and named,
// the rest still read; a history directory that does not exist holds nothing.
func TestRecordedInputs(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	hist := t.TempDir()
	e := newEngine(t, s, engine.WithHistoryDir(hist))
	six := mustBuild(t, e, "six", sixNodes("x"), engine.BuildOptions{})
	other := mustBuild(t, e, "other/one", sixNodes("x2"), engine.BuildOptions{})

	keyOf := map[string]artifacts.Digest{} // target/node -> key
	outOf := map[string]artifacts.Digest{} // target/node -> its "out" digest
	for target, res := range map[string]*engine.Result{"six": six, "other/one": other} {
		for _, n := range res.Nodes {
			rec, err := s.GetAction(ctx, n.Key)
			if err != nil {
				t.Fatalf("%s %s: %v", target, n.ID, err)
			}
			keyOf[target+"/"+n.ID] = n.Key
			outOf[target+"/"+n.ID] = rec.Outputs[0].Digest
		}
	}
	wiring := map[string][]string{"a": nil, "b": nil, "x": {"a"}, "y": {"x"}, "z": {"y", "b"}, "w": {"b"}}
	check := func(inputs map[artifacts.Digest][]artifacts.Digest) {
		t.Helper()
		for _, target := range []string{"six", "other/one"} {
			for id, from := range wiring {
				var want []artifacts.Digest
				for _, f := range from {
					want = append(want, outOf[target+"/"+f])
				}
				slices.SortFunc(want, func(a, b artifacts.Digest) int { return strings.Compare(a.Hex(), b.Hex()) })
				got, ok := inputs[keyOf[target+"/"+id]]
				if !ok || !slices.Equal(got, want) {
					t.Errorf("%s %s: inputs %v (known %v), want %v", target, id, got, ok, want)
				}
			}
		}
	}
	inputs, skipped, err := engine.RecordedInputs(ctx, hist)
	if err != nil || len(skipped) != 0 {
		t.Fatalf("RecordedInputs: %v, skipped %v", err, skipped)
	}
	check(inputs)

	// A newer record of "six" whose y names another input under y's key, one whose z names a key of
	// its own with material that is not its, and a file that is not JSON.
	dir := filepath.Join(hist, url.PathEscape("six"))
	recs, err := engine.History(ctx, hist, "six", 1)
	if err != nil {
		t.Fatal(err)
	}
	forged := recs[0]
	forged.Nodes = nil
	for _, n := range recs[0].Nodes {
		m := *n.Material
		switch n.ID {
		case "y":
			m.Inputs = map[string]artifacts.Digest{"in": artifacts.SumBytes([]byte("not y's input"))}
		case "z":
			n.Key = artifacts.SumBytes([]byte("a key of its own")).String()
		default:
			continue
		}
		n.Material = &m
		forged.Nodes = append(forged.Nodes, n)
	}
	b, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "99999999999999999998-1.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "99999999999999999999-1.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	inputs, skipped, err = engine.RecordedInputs(ctx, hist)
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 2 || !strings.Contains(skipped[0].Error(), "99999999999999999999-1.json") ||
		!strings.Contains(skipped[1].Error(), "does not hash to its key") {
		t.Errorf("skipped: %v; want the file that is not JSON and the forged record named", skipped)
	}
	check(inputs)
	if _, ok := inputs[artifacts.SumBytes([]byte("a key of its own"))]; ok {
		t.Error("a node whose material does not hash to its key was read")
	}

	if inputs, skipped, err := engine.RecordedInputs(ctx, filepath.Join(hist, "absent")); err != nil || len(inputs) != 0 || len(skipped) != 0 {
		t.Errorf("an absent history: %v, %v, %v; want nothing", inputs, skipped, err)
	}
}
