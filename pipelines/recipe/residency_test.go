package recipe

import (
	"errors"
	"strings"
	"testing"

	"orkpipe/ork/board"
)

// TestResidencySection: the budget's three forms, the domains default, and what is refused (naming the
// key); a residency without calibration names the missing section.
func TestResidencySection(t *testing.T) {
	for _, c := range []struct {
		set  string
		want board.Budget
		doms int
	}{
		{"residency={budget: auto}", board.Budget{Auto: true}, 1},
		{"residency={budget: 25%, domains: 3}", board.Budget{Percent: 25}, 3},
		{"residency={budget: 1.5GiB}", board.Budget{Bytes: 3 << 29}, 1},
		{"residency={}", board.Budget{Auto: true}, 1},
		{"residency.budget=100%", board.Budget{Percent: 100}, 1},
	} {
		r, err := Parse([]byte(good), "/r/x.yaml", c.set)
		if err != nil {
			t.Fatalf("%s: %v", c.set, err)
		}
		if r.Residency == nil || r.Residency.Spec() != c.want || r.Residency.Domains != c.doms {
			t.Errorf("%s: %+v, want budget %+v on %d domains", c.set, r.Residency, c.want, c.doms)
		}
	}
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"residency={budget: lots}"}, `residency.budget: "lots"`},
		{[]string{"residency={budget: 0%}"}, "residency.budget: residency budget \"0%\""},
		{[]string{"residency={budget: 120%}"}, "percentage in (0, 100]"},
		{[]string{"residency={domains: -1}"}, "residency.domains: -1"},
		{[]string{"residency={budget: auto, extra: 1}"}, "unknown field"},
	} {
		_, err := Parse([]byte(good), "/r/x.yaml", c.sets...)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.sets, err, c.want)
		}
	}
	noCal := strings.Replace(good, "calibration:\n  corpus: corpus.txt\n  sequences: 8\n  ctx: 128\n  window: 2\n", "", 1)
	noCal = strings.Replace(noCal, "method: gptq", "method: rtn", 1)
	if _, err := Parse([]byte(noCal), "/r/x.yaml", "residency.budget=auto"); err == nil || !strings.Contains(err.Error(), "calibration: required because the recipe plans expert residency") {
		t.Errorf("residency without calibration: %v", err)
	}
}

// TestSetWholeSection: --set of a whole section the recipe lacks ("promote={...}") decodes it (it was
// silently dropped before: the value decoded into a pointer to a nil pointer); null removes one.
func TestSetWholeSection(t *testing.T) {
	r, err := Parse([]byte(good), "/r/x.yaml", "promote={to: I8, budget_mib: 2}")
	if err != nil {
		t.Fatal(err)
	}
	if r.Promote == nil || r.Promote.To != "I8" || r.Promote.BudgetMiB != 2 {
		t.Fatalf("promote = %+v", r.Promote)
	}
	r, err = Parse([]byte(good), "/r/x.yaml", "screen=null")
	if err != nil || r.Screen != nil {
		t.Fatalf("screen=null: %+v, %v", r.Screen, err)
	}
}
