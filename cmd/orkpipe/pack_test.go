package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"

	"orkpipe/ork/board"
	"orkpipe/ork/pack"
	"orkpipe/pipelines/verify/verifytest"
)

// buildStoriesPack writes verifytest's pack of the real stories260K weights to dir/name; promote names
// one more weight to store as I8_ROT, skip names one to leave out.
func buildStoriesPack(t *testing.T, dir, name, promote, skip string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	verifytest.WritePack(t, path, verifytest.PackOptions{Promote: promote, Skip: skip})
	return path
}

// run executes the root command as main does and returns stdout and the exit status.
func runPackCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	opts := newGlobalOptions(&out, &errOut)
	root := newRootCommand(opts)
	root.SetArgs(args)
	ctx := context.Background()
	code := exitCode(ctx, root.ExecuteContext(ctx), &errOut)
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), code
}

func TestPackVerify(t *testing.T) {
	dir := t.TempDir()
	path := buildStoriesPack(t, dir, "s.orkpack", "", "")
	out, code := runPackCLI(t, "pack", "verify", path)
	if code != 0 || !strings.Contains(out, fmt.Sprintf(": ok: orkpack v%d", pack.Version)) {
		t.Fatalf("verify of a good pack: exit %d, output %s", code, out)
	}
	t.Log(out)

	// Corrupt one byte of one entry in a copy: verify names the entry and exits 1.
	r, err := pack.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	victim := r.Entries()[3]
	r.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[victim.Offset+victim.Length/2] ^= 0x40
	bad := filepath.Join(dir, "bad.orkpack")
	if err := os.WriteFile(bad, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = runPackCLI(t, "pack", "verify", "--json", bad)
	var res packVerifyJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if code != 1 || res.OK || len(res.Errors) != 1 || !strings.Contains(res.Errors[0], victim.Name) {
		t.Fatalf("corrupt entry: exit %d, %+v", code, res)
	}
	t.Log(res.Errors[0])

	// Truncated: open fails, exit 1, message says so.
	if err := os.WriteFile(bad, data[:len(data)-5000], 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = runPackCLI(t, "pack", "verify", bad)
	if code != 1 || !strings.Contains(out, "truncated: expected") {
		t.Fatalf("truncated: exit %d, %s", code, out)
	}
}

func TestInspectPack(t *testing.T) {
	path := buildStoriesPack(t, t.TempDir(), "s.orkpack", "", "")
	var out bytes.Buffer
	opts := newGlobalOptions(&out, &out)
	opts.json = true
	if err := runInspectPack(context.Background(), opts, path); err != nil {
		t.Fatal(err)
	}
	var got packInspectJSON
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if got.Version != pack.Version || got.Bytes != st.Size() || got.Board != "rk3588" || got.Domains != 1 || len(got.Entries) != 36 {
		t.Fatalf("inspect: version %d bytes %d board %q domains %d entries %d", got.Version, got.Bytes, got.Board, got.Domains, len(got.Entries))
	}
	r, err := pack.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i, e := range r.Entries() {
		rb, _ := board.ResidentBytes(e, board.RK3588())
		g := got.Entries[i]
		if g.Name != e.Name || g.DType != e.DType.String() || g.K != e.K || g.N != e.N || g.Bytes != e.Length || g.ResidentBytes != rb || g.QErr != e.QErr ||
			g.ActBits != e.ActBits || g.ActClip != e.ActClip {
			t.Fatalf("entry %d: %+v vs index %+v (resident %d)", i, g, e, rb)
		}
	}
	out.Reset()
	opts.json = false
	if err := runInspectPack(context.Background(), opts, path); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("orkpack v%d", pack.Version), "blk.0.ffn_down.weight", "I8", "I4_ROT_A8", "ACT  CLIP", "total: 36 entries"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("inspect text lacks %q:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}

// TestPackVerifyBoardProfile: --board takes a JSON or YAML profile; a profile other than the one the pack was
// planned with (here: no companion buffers) makes verify fail on the plan.
func TestPackVerifyBoardProfile(t *testing.T) {
	dir := t.TempDir()
	path := buildStoriesPack(t, dir, "s.orkpack", "", "")
	js, err := json.Marshal(board.RK3588())
	if err != nil {
		t.Fatal(err)
	}
	yml, err := yaml.JSONToYAML(js)
	if err != nil {
		t.Fatal(err)
	}
	same := filepath.Join(dir, "rk3588.yaml")
	if err := os.WriteFile(same, yml, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := runPackCLI(t, "pack", "verify", "--board", same, path); code != 0 {
		t.Fatalf("verify with the same profile as YAML: exit %d: %s", code, out)
	}
	other := board.RK3588()
	other.Companion.Widths = []board.Width{}
	js, _ = json.Marshal(other)
	diff := filepath.Join(dir, "nocompanion.json")
	if err := os.WriteFile(diff, js, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runPackCLI(t, "pack", "verify", "--board", diff, path)
	if code != 1 || !strings.Contains(out, "stored plan differs") {
		t.Fatalf("verify against another profile: exit %d: %s", code, out)
	}
	t.Log(out)
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"name":"x"}`), 0o644)
	if out, code := runPackCLI(t, "pack", "verify", "--board", bad, path); code != 1 || !strings.Contains(out, "npu_cores") {
		t.Fatalf("verify with an invalid profile: exit %d: %s", code, out)
	}
}

// TestPackVerifyOtherBoard: a pack planned for a board orkpipe has no profile of (a profile file's name)
// needs --board FILE; the refusal names the pack.
func TestPackVerifyOtherBoard(t *testing.T) {
	ctx := context.Background()
	prof := board.RK3588()
	prof.Name = "rk3588-custom"
	dir := t.TempDir()
	path := filepath.Join(dir, "p.orkpack")
	w, err := pack.Create(ctx, path, board.Planner(prof))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wt := pack.Weight{Meta: pack.Meta{Name: "blk.0.x.weight", DType: pack.I8, K: 32, N: 8, Source: pack.Digest{1}},
		Codes: make([]int8, 32*8), Scales: []float32{1, 1, 1, 1, 1, 1, 1, 1}}
	if err := w.Add(ctx, wt); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = runCLI(t, "pack", "verify", path)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), path+`: the pack was planned for board "rk3588-custom", which is not built in: pass --board FILE`) {
		t.Fatalf("pack verify without --board: %v", err)
	}
	b, err := json.Marshal(prof)
	if err != nil {
		t.Fatal(err)
	}
	profPath := filepath.Join(dir, "custom.json")
	if err := os.WriteFile(profPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := runPackCLI(t, "pack", "verify", path, "--board", profPath); code != 0 || !strings.Contains(out, ": ok:") {
		t.Fatalf("pack verify --board %s: exit %d: %s", profPath, code, out)
	}
}
