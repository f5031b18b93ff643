package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
)

func TestShown(t *testing.T) {
	for in, want := range map[string]string{
		"blk.0.attn_q.weight":         "blk.0.attn_q.weight",
		"a name with spaces, ünïcode": "a name with spaces, ünïcode",
		"real \ufffd replacement":     "real \ufffd replacement",
		"x\nFAKE LINE: verified OK":   `"x\nFAKE LINE: verified OK"`,
		"\x1b[2J\x1b[31mred":          `"\x1b[2J\x1b[31mred"`,
		"cr\roverwrites":              `"cr\roverwrites"`,
		"tab\tseparated":              `"tab\tseparated"`,
		"bidi \u202egnp.exe":          `"bidi \u202egnp.exe"`,
		"invalid \xff utf-8":          `"invalid \xff utf-8"`,
		"c1 \u009b31m control":        `"c1 \u009b31m control"`,
		"":                            "",
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestNamesShownQuoted: an entry name holding a newline and escape sequences (the format allows any
// UTF-8 but NUL) is printed quoted by inspect, rank and diff, so it cannot forge a line of their output.
func TestNamesShownQuoted(t *testing.T) {
	ctx := context.Background()
	const forged = "blk.0.y.weight\nFAKE LINE: all entries verified OK\x1b[2J"
	write := func(names ...string) string {
		path := filepath.Join(t.TempDir(), "p.orkpack")
		w, err := pack.Create(ctx, path, board.Planner(board.RK3588()))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for i, name := range names {
			wt := pack.Weight{Meta: pack.Meta{Name: name, DType: pack.I8, K: 32, N: 8, Source: pack.Digest{byte(i + 1)}},
				Codes: make([]int8, 32*8), Scales: make([]float32, 8)}
			for j := range wt.Scales {
				wt.Scales[j] = 1
			}
			if err := w.Add(ctx, wt); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a, b := write("blk.0.x.weight", forged), write("blk.0.x.weight")
	for _, args := range [][]string{{"inspect", a}, {"rank", a}, {"diff", a, b}} {
		out, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
		if !strings.Contains(out, strconv.Quote(forged)) || strings.Contains(out, "\nFAKE LINE") || strings.Contains(out, "\x1b") {
			t.Errorf("%q printed the name unquoted:\n%s", args, out)
		}
	}
}
