package verify_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
	"orkpipe/ork/board"
	"orkpipe/ork/boardhost"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/verify"
	"orkpipe/pipelines/verify/verifytest"
)

// check returns the named check of rep, failing the test when it is absent.
func check(t *testing.T, rep *boardhost.Report, name string) boardhost.Check {
	t.Helper()
	for _, c := range rep.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, rep.Checks)
	return boardhost.Check{}
}

func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	verifytest.BuildDir(t, dir)
	return dir
}

func TestVerifyDirGood(t *testing.T) {
	dir := fixture(t)
	res, err := verify.Dir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.OK() {
		t.Fatalf("good build directory failed: %+v", res.Report.Checks)
	}
	for _, n := range []string{"integrity", "stub-header", "pack", "loader-coverage", "stub", "fit", "fingerprint"} {
		if c := check(t, res.Report, n); !c.OK {
			t.Errorf("check %s failed: %s", n, c.Detail)
		}
	}
	if res.Profile.Name != "rk3588" {
		t.Errorf("profile %q, want the pack's rk3588", res.Profile.Name)
	}
	if len(res.Report.Inputs) != 2 || res.Report.Inputs[0].Role != "pack" || res.Report.Inputs[1].Role != "stub" {
		t.Errorf("inputs %+v, want pack and stub hashed", res.Report.Inputs)
	}
}

func TestVerifyNotABuildDir(t *testing.T) {
	dir := fixture(t)
	if err := os.Remove(filepath.Join(dir, "provenance.json")); err != nil {
		t.Fatal(err)
	}
	_, err := verify.Dir(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "provenance.json") {
		t.Fatalf("err = %v, want one naming provenance.json", err)
	}
}

// Acceptance 1: the board-runtime stand-ins.
func TestVerifyRunStandIns(t *testing.T) {
	text := testfiles.Path(t, "tinystories_sample.txt")
	tests := []struct {
		standIn string
		opts    []boardhost.RunOption
		want    []string // in the failed run/inputs check detail
		ppl     float64
	}{
		{standIn: "good", ppl: 2.6798},
		{standIn: "rewrites-pack", want: []string{"pack changed during run"}},
		{standIn: "fails", want: []string{"command failed", "exit status 1", "main: unable to load model"}},
		{standIn: "hangs", opts: []boardhost.RunOption{boardhost.WithTimeout(2 * time.Second)}, want: []string{"timed out", "[1]2.6139,"}},
	}
	for _, tt := range tests {
		t.Run(tt.standIn, func(t *testing.T) {
			dir := fixture(t)
			cmd := "'" + verifytest.StandIn(t, tt.standIn) + "' -m {stub} --ork-pack {pack} -f {text}"
			res, err := verify.Dir(context.Background(), dir, verify.WithRun(cmd, text, tt.opts...))
			if err != nil {
				t.Fatal(err)
			}
			rep := res.Report
			if tt.want == nil {
				if !rep.OK() {
					t.Fatalf("good stand-in failed: %+v", rep.Checks)
				}
				if rep.Run == nil || rep.Run.Scores == nil || rep.Run.PPL != tt.ppl || rep.Run.Chunks != 39 {
					t.Fatalf("run %+v, want PPL %v over 39 chunks", rep.Run, tt.ppl)
				}
				t.Logf("run: PPL %v ± %v (%s, %d chunks)", rep.Run.PPL, rep.Run.PPLErr, rep.Run.PPLSource, rep.Run.Chunks)
				return
			}
			if rep.OK() {
				t.Fatalf("stand-in %s passed verification", tt.standIn)
			}
			run := check(t, rep, "run")
			if run.OK {
				t.Fatalf("run check passed: %s", run.Detail)
			}
			all := run.Detail + "\n" + strings.Join(rep.Run.Tail, "\n")
			t.Logf("run: %s (tail: %d lines, last %q)", run.Detail, len(rep.Run.Tail), rep.Run.Tail[len(rep.Run.Tail)-1])
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("run failure %q (tail %q) does not mention %q", run.Detail, rep.Run.Tail, w)
				}
			}
			if tt.standIn == "rewrites-pack" {
				if c := check(t, rep, "inputs-unchanged"); c.OK {
					t.Errorf("inputs-unchanged passed after the pack was rewritten")
				}
			}
		})
	}
}

// The KL-divergence mode of llama-perplexity: PPL from "Mean PPL(Q)", the KLD summary parsed.
func TestVerifyRunKLD(t *testing.T) {
	dir := fixture(t)
	text := testfiles.Path(t, "tinystories_sample.txt")
	cmd := "'" + verifytest.StandIn(t, "good") + "' -m {stub} --ork-pack {pack} -f {text} --kl-divergence"
	res, err := verify.Dir(context.Background(), dir, verify.WithRun(cmd, text))
	if err != nil {
		t.Fatal(err)
	}
	r := res.Report.Run
	if !res.Report.OK() || r == nil || r.Scores == nil {
		t.Fatalf("KLD run failed: %+v", res.Report.Checks)
	}
	if r.PPL != 2.6798 || r.PPLSource != boardhost.PPLFromMeanPPLQ || r.KLD["mean"] != 0.06558 {
		t.Fatalf("scores %+v, want Mean PPL(Q) 2.6798 and mean KLD 0.06558", r.Scores)
	}
}

// A run is never started on a pack that failed a check.
func TestVerifyRunSkippedWhenChecksFail(t *testing.T) {
	dir := fixture(t)
	os.Chmod(filepath.Join(dir, "report.json"), 0o644)
	if err := os.WriteFile(filepath.Join(dir, "report.json"), []byte(`{"board":"rk3588","verify":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	res, err := verify.Dir(context.Background(), dir, verify.WithRun("touch "+marker+" {pack}", "", boardhost.WithoutScore()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the run command was started although checks had failed")
	}
	if c := check(t, res.Report, "run"); c.OK || !strings.Contains(c.Detail, "integrity") || !strings.Contains(c.Detail, "stub-header") {
		t.Errorf("run check %+v, want not run naming integrity and stub-header", c)
	}
	if c := check(t, res.Report, "stub-header"); !strings.Contains(c.Detail, "verify.stub_header is missing") {
		t.Errorf("stub-header detail %q does not name the missing field", c.Detail)
	}
}

// Acceptance 2a: an entry whose bytes changed after the index was written.
func TestVerifyCorruptEntry(t *testing.T) {
	dir := fixture(t)
	packPath := filepath.Join(dir, verifytest.Name+".orkpack")
	r, err := pack.Open(context.Background(), packPath)
	if err != nil {
		t.Fatal(err)
	}
	victim := r.Entries()[3]
	r.Close()
	os.Chmod(packPath, 0o644)
	f, err := os.OpenFile(packPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, victim.Offset+5); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, victim.Offset+5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// Provenance re-recorded over the changed bytes: the pack's own entry hash must catch it.
	verifytest.WriteProvenance(t, dir, verifytest.Name+".orkpack", verifytest.Name+".orkpack.gguf", "report.json")
	res, err := verify.Dir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := check(t, res.Report, "integrity"); !c.OK {
		t.Fatalf("integrity failed (%s); the test wants only the entry hash to catch it", c.Detail)
	}
	c := check(t, res.Report, "pack")
	if c.OK || !strings.Contains(c.Detail, victim.Name) {
		t.Fatalf("pack check %+v, want a failure naming entry %s", c, victim.Name)
	}
	t.Logf("pack: %s", c.Detail)
	if res.Report.OK() {
		t.Fatal("report OK with a corrupt entry")
	}
	// Without re-recording the provenance, integrity catches it too.
	dir2 := fixture(t)
	p2 := filepath.Join(dir2, verifytest.Name+".orkpack")
	os.Chmod(p2, 0o644)
	f2, _ := os.OpenFile(p2, os.O_RDWR, 0)
	f2.WriteAt([]byte{b[0]}, victim.Offset+5)
	f2.Close()
	res2, err := verify.Dir(context.Background(), dir2)
	if err != nil {
		t.Fatal(err)
	}
	if c := check(t, res2.Report, "integrity"); c.OK || !strings.Contains(c.Detail, "stories.orkpack: sha256") {
		t.Fatalf("integrity %+v, want a sha256 mismatch naming the pack", c)
	}
}

// Acceptance 2b: a stub with a zeroed tensor the pack does not own.
func TestVerifyStubZeroedNonOwned(t *testing.T) {
	dir := fixture(t)
	stub := filepath.Join(dir, verifytest.Name+".orkpack.gguf")
	g, err := ggufOpen(stub)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := g.Tensor("output_norm.weight")
	if err != nil {
		t.Fatal(err)
	}
	start, end := g.DataRange(ti)
	g.Close()
	os.Chmod(stub, 0o644)
	f, err := os.OpenFile(stub, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, end-start), start); err != nil {
		t.Fatal(err)
	}
	f.Close()
	verifytest.WriteProvenance(t, dir, verifytest.Name+".orkpack", verifytest.Name+".orkpack.gguf", "report.json")
	res, err := verify.Dir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	c := check(t, res.Report, "stub")
	if c.OK || !strings.Contains(c.Detail, "output_norm.weight") {
		t.Fatalf("stub check %+v, want a failure naming output_norm.weight", c)
	}
	t.Logf("stub: %s", c.Detail)
	if c := check(t, res.Report, "stub-header"); !c.OK {
		t.Errorf("stub-header failed though only data changed: %s", c.Detail)
	}
}

// Acceptance 2c: a pack that needs more domains than the profile allows.
func TestVerifyDoesNotFit(t *testing.T) {
	dir := fixture(t)
	r, err := pack.Open(context.Background(), filepath.Join(dir, verifytest.Name+".orkpack"))
	if err != nil {
		t.Fatal(err)
	}
	var largest int64
	for _, e := range r.Entries() {
		largest = max(largest, e.ResidentBytes)
	}
	r.Close()
	// Every entry fits one domain, but not all of them two.
	p := board.RK3588()
	p.Name = "rk3588-tiny-domains"
	p.MaxDomains = 2
	p.Headroom = 0
	p.DomainCeiling = largest
	res, err := verify.Dir(context.Background(), dir, verify.WithProfile(p))
	if err != nil {
		t.Fatal(err)
	}
	c := check(t, res.Report, "fit")
	if c.OK || !strings.Contains(c.Detail, "domains") || !strings.Contains(c.Detail, "rk3588-tiny-domains has 2") {
		t.Fatalf("fit check %+v, want a failure naming the 2-domain limit", c)
	}
	t.Logf("fit: %s", c.Detail)
}

// Loader coverage: an I8 entry holding a code the quantizer never writes (-128) decodes out of range.
func TestVerifyLoaderCoverage(t *testing.T) {
	dir := t.TempDir()
	victim := verifytest.BuildDirWith(t, dir, func(w *pack.Weight) bool {
		if w.DType != pack.I8 {
			return false
		}
		w.Codes[w.K+3] = -128
		return true
	})
	out, err := verify.Dir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if c := check(t, out.Report, "pack"); !c.OK {
		t.Fatalf("pack check failed (%s); the entry's hash is consistent", c.Detail)
	}
	c := check(t, out.Report, "loader-coverage")
	if c.OK || !strings.Contains(c.Detail, victim) || !strings.Contains(c.Detail, "code -128 at row 1 col 3") {
		t.Fatalf("loader-coverage %+v, want a failure naming entry %s and the code", c, victim)
	}
	t.Logf("loader-coverage: %s", c.Detail)
}

// TestVerifySparseJSON: a build directory whose provenance.json or report.json claims 256 MiB (a sparse
// file, as a pulled artifact can declare with one byte of data; 10 GiB ran verify out of memory) is
// refused by its size, naming it, not read into memory.
func TestVerifySparseJSON(t *testing.T) {
	for _, name := range []string{"provenance.json", "report.json"} {
		t.Run(name, func(t *testing.T) {
			dir := fixture(t)
			path := filepath.Join(dir, name)
			os.Remove(path) // the fixture's may be read-only
			if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, 256<<20); err != nil {
				t.Fatal(err)
			}
			res, err := verify.Dir(context.Background(), dir)
			if err == nil && res.Report.OK() {
				t.Fatal("verified a build directory with a 256 MiB " + name)
			}
			msg := fmt.Sprint(err)
			if err == nil {
				msg = fmt.Sprintf("%+v", res.Report.Checks)
			}
			if !strings.Contains(msg, path+": 268435456 bytes, more than the") {
				t.Errorf("%s", msg)
			}
		})
	}
}

// TestVerifyDecodesWithinADomain: the loader check reads an entry whole only when one domain of the board
// holds it; a larger one (a sparse pack can claim 64 GiB) is hashed through a bounded buffer and reported
// as not decoded, beside the fit check's failure.
func TestVerifyDecodesWithinADomain(t *testing.T) {
	dir := fixture(t)
	p := board.RK3588()
	p.Name, p.DomainCeiling, p.Headroom = "tiny", 16<<10, 0
	res, err := verify.Dir(context.Background(), dir, verify.WithProfile(p))
	if err != nil {
		t.Fatal(err)
	}
	loader, fit := check(t, res.Report, "loader-coverage"), check(t, res.Report, "fit")
	if loader.OK || !strings.Contains(loader.Detail, "bytes, more than the 16384 a domain of the board holds: not decoded") || fit.OK {
		t.Fatalf("loader check %+v, fit %+v: want entries above 16 KiB not decoded, and the fit failing", loader, fit)
	}
	if c := check(t, res.Report, "integrity"); !c.OK {
		t.Errorf("integrity %+v: the large entries are still hashed", c)
	}
}
