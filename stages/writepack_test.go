package stages_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/fixtures"
	"orkpipe/ork/pack"
)

// TestWritePackEntries: write-orkpack (each entry prepared while the one before is written) stores the
// entries in the order of its parameters, each as the tile stage wrote it; an entry bound under another
// entry's name, or a truncated entry, in the middle of the list fails the node with an error naming the
// file.
func TestWritePackEntries(t *testing.T) {
	model := fixtures.Synth(t, fixtures.MoE)
	paths := tiledExperts(t, model)
	var names, quoted []string
	for e := range paths {
		names, quoted = append(names, expertName(e)), append(quoted, `"`+expertName(e)+`"`)
	}
	// Written in reverse order: the pack follows the parameters, not the inputs' names.
	order := []int{3, 2, 1, 0}
	var list []string
	for _, i := range order {
		list = append(list, quoted[i])
	}
	params := `{"board":"rk3588","entries":[` + strings.Join(list, ",") + `],"max_entry_bytes":1048576}`
	inputs := func(swap func(in map[string]string)) map[string]string {
		in := map[string]string{}
		for i, n := range names {
			in["e."+n] = paths[i]
		}
		if swap != nil {
			swap(in)
		}
		return in
	}
	out, err := runStage(t, "write-orkpack", params, inputs(nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pr, err := pack.Open(ctx, out["pack"])
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	es := pr.Entries()
	if len(es) != len(order) {
		t.Fatalf("%d entries, want %d", len(es), len(order))
	}
	for j, i := range order {
		if es[j].Name != names[i] {
			t.Errorf("entry %d is %q, want %q", j, es[j].Name, names[i])
		}
	}

	short := filepath.Join(t.TempDir(), "short.entry")
	b, err := os.ReadFile(paths[2])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, b[:len(b)-100], 0o444); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, file string
		swap       func(in map[string]string)
	}{
		{"an entry bound under another's name", paths[1], func(in map[string]string) { in["e."+names[3]] = paths[1] }},
		{"a truncated entry", short, func(in map[string]string) { in["e."+names[2]] = short }},
	} {
		_, err := runStage(t, "write-orkpack", params, inputs(c.swap))
		if err == nil || !strings.Contains(err.Error(), c.file) {
			t.Errorf("%s: %v, want an error naming %s", c.what, err, c.file)
		}
		t.Log(err)
	}
}
