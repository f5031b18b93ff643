package boardhost

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompareSameMachine(t *testing.T) {
	q8, _ := verifiedReport(t, fakeBoard, "ORKPACK-Q8")
	q4, _ := verifiedReport(t, fakeBoard, "ORKPACK-Q4")
	if q8.digestOf("pack") == q4.digestOf("pack") {
		t.Fatal("the two arms must have different packs")
	}
	c, err := Compare(q8, q4, false)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Comparable || len(c.Mismatches) != 0 || len(c.Metrics) != 1 {
		t.Fatalf("%+v", c)
	}
	m := c.Metrics[0]
	want := (2.6798 - 2.4894) / 2.4894
	if m.Name != "ppl" || m.A != 2.4894 || m.B != 2.6798 || m.RelDiff == nil || math.Abs(*m.RelDiff-want) > 1e-12 {
		t.Errorf("metric %+v, want rel diff %v", m, want)
	}
}

func TestCompareKLDMetrics(t *testing.T) {
	a, _ := verifiedReport(t, fakeBoard, "ORKPACK-Q4", "--kl-divergence")
	b, _ := verifiedReport(t, fakeBoard, "ORKPACK-Q8", "--kl-divergence")
	c, err := Compare(a, b, false)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range c.Metrics {
		names[m.Name] = true
		if strings.HasSuffix(m.Name, "_err") {
			t.Errorf("uncertainty %s compared as a metric", m.Name)
		}
	}
	for _, n := range []string{"ppl", "kld.mean", "kld.median", "kld.p99", "kld.same_top_p_pct"} {
		if !names[n] {
			t.Errorf("metric %s missing from %v", n, names)
		}
	}
}

func TestCompareRefusesMismatches(t *testing.T) {
	base, _ := verifiedReport(t, fakeBoard, "ORKPACK-Q8")
	other := copyTree(t, fakeBoard)
	os.WriteFile(filepath.Join(other, "proc/sys/kernel/version"), []byte("#1 SMP Tue Jul 8 09:00:00 UTC 2026\n"), 0o644)
	os.WriteFile(filepath.Join(other, "proc/sys/kernel/hostname"), []byte("rk3588-board-2\n"), 0o644)
	otherBoard, _ := verifiedReport(t, other, "ORKPACK-Q4")

	c, err := Compare(base, otherBoard, false)
	if !errors.Is(err, ErrNotComparable) || c == nil || c.Comparable || c.Metrics != nil {
		t.Fatalf("err = %v, comparison %+v", err, c)
	}
	for _, part := range []string{"machine.hostname", "kernel.version"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error does not name %s: %v", part, err)
		}
	}
	// --cross-machine: the numbers, labelled not comparable.
	c, err = Compare(base, otherBoard, true)
	if err != nil || c.Comparable || len(c.Metrics) != 1 || len(c.Mismatches) != 2 {
		t.Fatalf("cross-machine: err %v, %+v", err, c)
	}

	// Different run program (a modified copy of the runtime) and different text.
	changed := *base
	run := *base.Run
	prog := *run.Program
	prog.Objects = append([]Object(nil), prog.Objects...)
	prog.Objects[0].Digest = sumBytes([]byte("rebuilt runtime"))
	prog.Digest = programDigest(prog.Objects)
	run.Program = &prog
	changed.Run = &run
	changed.Inputs = append([]FileDigest(nil), base.Inputs...)
	changed.Inputs[2].Digest = sumBytes([]byte("another text"))
	_, err = Compare(base, &changed, false)
	if !errors.Is(err, ErrNotComparable) || !strings.Contains(err.Error(), "program: program") || !strings.Contains(err.Error(), "text:") {
		t.Errorf("err = %v, want program and text named", err)
	}

	// A failed report is never compared, cross-machine or not.
	failed := *base
	failed.Checks = append(append([]Check(nil), base.Checks...), Check{Name: "fit", OK: false, Detail: "24 domains > 16"})
	if _, err := Compare(base, &failed, true); !errors.Is(err, ErrReport) || !strings.Contains(err.Error(), "fit") {
		t.Errorf("failed report: err = %v", err)
	}
}

func TestCompareCommandTemplateMustMatch(t *testing.T) {
	a, _ := verifiedReport(t, fakeBoard, "ORKPACK-Q8")
	b, _ := verifiedReport(t, fakeBoard, "ORKPACK-Q4", "--kl-divergence")
	_, err := Compare(a, b, false)
	if !errors.Is(err, ErrNotComparable) || !strings.Contains(err.Error(), "run.command") || !strings.Contains(err.Error(), "ppl_source") {
		t.Errorf("err = %v, want run.command and ppl_source named", err)
	}
}

func TestCompareChunksMustMatch(t *testing.T) {
	a, _ := verifiedReport(t, fakeBoard, "ORKPACK-Q8")
	b := *a
	run := *a.Run
	s := *a.Run.Scores
	s.Chunks = 20
	run.Scores = &s
	b.Run = &run
	if _, err := Compare(a, &b, false); !errors.Is(err, ErrNotComparable) || !strings.Contains(err.Error(), `chunks: "39" vs "20"`) {
		t.Errorf("err = %v", err)
	}
}
