package boardhost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

// verifiedReport runs the good stand-in on a pack with packPrefix on the stand-in board and
// returns the report, written to and read back from a file.
func verifiedReport(t testing.TB, root, packPrefix string, extra ...string) (*Report, string) {
	t.Helper()
	in := tempInputs(t, packPrefix)
	cmd := script(t, "fake-llama-perplexity-good.sh") + " -m {stub} --ork-pack {pack} -f {text} " + strings.Join(extra, " ")
	var r Report
	r.Add("integrity", nil, "caller's check: 37 entries verified") // as ork/pack would append
	f, err := Collect(context.Background(), WithRoot(root), WithEnv([]string{"ORK_OFF=0"}))
	if err != nil {
		t.Fatal(err)
	}
	r.SetFingerprint(f)
	rec, err := Run(context.Background(), cmd, in, WithRunEnv([]string{"PATH=/usr/bin:/bin", "ORK_OFF=0"}))
	r.SetRun(rec, err)
	path := filepath.Join(t.TempDir(), "report.json")
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	return back, path
}

func TestReportRoundTrip(t *testing.T) {
	in := tempInputs(t, "ORKPACK-Q8")
	var r Report
	r.Add("integrity", nil, "ok")
	f, err := Collect(context.Background(), WithRoot(fakeBoard))
	if err != nil {
		t.Fatal(err)
	}
	r.SetFingerprint(f)
	rec, err := Run(context.Background(), script(t, "fake-llama-perplexity-good.sh")+" -m {stub} --ork-pack {pack} -f {text}", in)
	r.SetRun(rec, err)
	if !r.OK() || len(r.Checks) != 4 {
		t.Fatalf("checks %+v", r.Checks)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeReport(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if back.Run.PPL != 2.4894 || back.Fingerprint.Digest() != f.Digest() || back.Run.Program.Digest != rec.Program.Digest ||
		back.digestOf("pack") != rec.Before[0].Digest || back.digestOf("text") != rec.Before[2].Digest {
		t.Errorf("decoded %+v", back)
	}
	if !reflect.DeepEqual(back.Checks, r.Checks) || !reflect.DeepEqual(back.Inputs, r.Inputs) {
		t.Errorf("checks/inputs differ after round trip")
	}
	var sum bytes.Buffer
	if err := back.WriteSummary(&sum); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"verify: PASSED (4 checks)", "rk3588-board-1", "RKNPU driver: v0.9.8", "PPL 2.4894 ± 0.03225 (final-estimate, 39 chunks)", "pack         blake3:"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
}

func TestDecodeReportRejects(t *testing.T) {
	r, _ := verifiedReport(t, fakeBoard, "")
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	for _, tc := range []struct{ name, from, to, want string }{
		{"format", `"format":"orkpipe.board-verify/v1"`, `"format":"orkpipe.board-verify/v0"`, `field "format"`},
		{"ok lies", `"ok":true`, `"ok":false`, `field "ok" is false`},
		{"check flipped", `"name":"integrity","ok":true`, `"name":"integrity","ok":false`, `field "ok" is true`},
		{"fingerprint edited", `"hostname":"rk3588-board-1"`, `"hostname":"board-2"`, "fingerprint digest"},
		{"program edited", r.Run.Program.Objects[0].Digest, sumBytes([]byte("x")), "does not match its objects"},
		{"bad input digest", r.Inputs[0].Digest, "blake3:xyz", "not blake3:<64 hex>"},
		{"unknown field", `"checks":`, `"extra":1,"checks":`, "unknown field"},
		{"bad ppl", `"ppl":2.6798`, `"ppl":-1`, "not a positive finite perplexity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(good, tc.from, tc.to, 1)
			if bad == good {
				t.Fatalf("edit %q did not apply", tc.from)
			}
			_, err := DecodeReport(strings.NewReader(bad))
			if !errors.Is(err, ErrReport) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrReport containing %q", err, tc.want)
			}
		})
	}
	if _, err := ReadReport(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}

func TestReportEmptyIsNotOK(t *testing.T) {
	var r Report
	if r.OK() {
		t.Error("a report without checks must not be OK")
	}
	r.Add("integrity", errors.New("entry blk.0.attn_q.weight: BLAKE3 mismatch"), "")
	if r.OK() || r.Checks[0].Detail != "entry blk.0.attn_q.weight: BLAKE3 mismatch" {
		t.Errorf("%+v", r.Checks)
	}
}

// A report's temp file that a killed writer left (its lock gone with the process) is removed by the
// next WriteFile of that report; a live writer's (locked) is not. It stayed, under a random name.
func TestReportWriteFileSweepsDeadTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	dead := filepath.Join(dir, ".report.json.0123456789abcdef.tmp")
	live := filepath.Join(dir, ".report.json.fedcba9876543210.tmp")
	testfiles.DeadAndLiveTemps(t, dead, live, []byte(`{"half a report`))
	var r Report
	r.Add("integrity", nil, "ok")
	if err := r.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReport(path); err != nil {
		t.Fatal(err)
	}
	if names, want := testfiles.DirNames(t, dir), []string{".report.json.fedcba9876543210.tmp", "report.json"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("%s holds %v, want %v (the dead writer's temp file removed, the live one's kept)", dir, names, want)
	}
}
