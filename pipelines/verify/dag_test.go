package verify_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine/executortest"
	"orkpipe/pipelines/verify"
	"orkpipe/stages"
)

func TestVerifyBoardParamsValidate(t *testing.T) {
	good := stages.VerifyBoardParams{Board: "rk3588", Command: "llama-perplexity -m {stub} --ork-pack {pack} -f {text}",
		Fingerprint: artifacts.SumBytes([]byte("fp")).String(), Program: artifacts.SumBytes([]byte("prog")).String()}
	for _, tc := range []struct {
		name string
		edit func(*stages.VerifyBoardParams)
		want string
	}{
		{"good", func(*stages.VerifyBoardParams) {}, ""},
		{"no board", func(p *stages.VerifyBoardParams) { p.Board = "" }, `"board"`},
		{"no command", func(p *stages.VerifyBoardParams) { p.Command = "" }, `"command"`},
		{"bad fingerprint", func(p *stages.VerifyBoardParams) { p.Fingerprint = "sha256:00" }, `"fingerprint"`},
		{"bad program", func(p *stages.VerifyBoardParams) { p.Program = "" }, `"program"`},
	} {
		p := good
		tc.edit(&p)
		b, _ := json.Marshal(p)
		bound, err := stages.VerifyBoard.Bind(b)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			if s := bound.Spec(); strings.Join(s.Inputs, ",") != "pack,stub,text" || len(s.Tools) != 0 {
				t.Errorf("spec %+v, want inputs pack, stub, text and no tools", s)
			}
			continue
		}
		if !errors.Is(err, stages.ErrBadParams) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want ErrBadParams naming %s", tc.name, err, tc.want)
		}
	}
}

// Run on a build host never fabricates a verification: it fails with ErrBoardEvidence and says
// what to run on the board.
func TestVerifyBoardRunRefuses(t *testing.T) {
	verify.RegisterKind()
	verify.RegisterKind() // idempotent
	dir := t.TempDir()
	files := map[string]stages.File{}
	for _, n := range []string{"pack", "stub", "text"} {
		p := filepath.Join(dir, n)
		os.WriteFile(p, []byte(n), 0o444)
		files[n] = stages.File{Path: p, Digest: artifacts.SumBytes([]byte(n)), Size: int64(len(n))}
	}
	p := stages.VerifyBoardParams{Board: "rk3588", Command: "rt {pack} {stub} {text}",
		Fingerprint: artifacts.SumBytes([]byte("fp")).String(), Program: artifacts.SumBytes([]byte("prog")).String()}
	pb, _ := json.Marshal(p)
	canon, err := stages.Canonicalize(pb)
	if err != nil {
		t.Fatal(err)
	}
	m := stages.KeyMaterial{Stage: "verify-board", Version: 1, Params: canon, Tools: map[string]artifacts.Digest{}, Numerics: executortest.Numerics(t),
		Inputs: map[string]artifacts.Digest{"pack": files["pack"].Digest, "stub": files["stub"].Digest, "text": files["text"].Digest}}
	out := filepath.Join(dir, "out")
	os.Mkdir(out, 0o755)
	_, err = stages.Execute(context.Background(), m, files, nil, out, nil)
	if !errors.Is(err, stages.ErrBoardEvidence) || !strings.Contains(err.Error(), "orkpipe verify REF --board rk3588") {
		t.Fatalf("err = %v, want ErrBoardEvidence with instructions", err)
	}
}
