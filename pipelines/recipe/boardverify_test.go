package recipe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	fpDigest   = "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
	progDigest = "blake3:5b8b4c8f2d9b6f2c1e0a7d3c9b8a7f6e5d4c3b2a1908f7e6d5c4b3a291807f6e"
)

var boardVerifySets = []string{
	"board_verify.ref=registry.example.com/packs/demo:v1",
	"board_verify.command=llama-perplexity -m {stub} --ork-pack {pack} -f {text}",
	"board_verify.fingerprint=" + fpDigest,
	"board_verify.program=" + progDigest,
	"board_verify.trust=keys/board.pub",
}

func TestBoardVerifyDefaults(t *testing.T) {
	r, err := Parse([]byte(good), "/recipes/demo.yaml", boardVerifySets...)
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	b := r.BoardVerify
	// text comes from the recipe's screen.text (its folder); trust from a --set (the working directory).
	if b == nil || b.Board != "rk3588" || b.Text != "/recipes/eval.txt" || b.Trust != filepath.Join(wd, "keys/board.pub") ||
		b.Command != "llama-perplexity -m {stub} --ork-pack {pack} -f {text}" {
		t.Errorf("board_verify %+v: want board rk3588 (the recipe's), text = screen.text, paths resolved", b)
	}
	r, err = Parse([]byte(good), "/recipes/demo.yaml", append(boardVerifySets, "board_verify.text=/data/wiki.txt")...)
	if err != nil || r.BoardVerify.Text != "/data/wiki.txt" {
		t.Errorf("explicit text: %v %+v", err, r.BoardVerify)
	}
	if r, err := Parse([]byte(good), "/recipes/demo.yaml"); err != nil || r.BoardVerify != nil {
		t.Errorf("without board_verify: %v %+v", err, r.BoardVerify)
	}
}

func TestBoardVerifyErrors(t *testing.T) {
	noScreen := good[:strings.Index(good, "screen:")] + "output: out\n"
	without := func(key string) []string {
		var s []string
		for _, a := range boardVerifySets {
			if !strings.HasPrefix(a, "board_verify."+key+"=") {
				s = append(s, a)
			}
		}
		return s
	}
	for _, tc := range []struct {
		name, yaml string
		sets       []string
		want       string
	}{
		{"no ref", good, without("ref"), "board_verify.ref: the artifact reference"},
		{"ref without tag", good, append(without("ref"), "board_verify.ref=registry.example.com/packs/demo"), `board_verify.ref: "registry.example.com/packs/demo"`},
		{"no command", good, without("command"), "board_verify.command"},
		{"bad fingerprint", good, append(without("fingerprint"), "board_verify.fingerprint=sha256:00"), "board_verify.fingerprint"},
		{"no program", good, without("program"), "board_verify.program"},
		{"no trust", good, without("trust"), "board_verify.trust: a public key file is required"},
		{"no text without screen", noScreen, boardVerifySets, "board_verify.text: required"},
		{"board profile file", good, append(boardVerifySets, "board=boards/custom.yaml"), "board_verify.board: required because the recipe's board is a profile file"},
		{"unknown key", good, append(boardVerifySets, "board_verify.host=x"), `unknown key "board_verify.host"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "/r/x.yaml", tc.sets...)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
	// Strict YAML: a misspelt key inside board_verify is an error with its line.
	y := good + "board_verify:\n  ref: r.example.com/p/d:v1\n  comand: x\n"
	if _, err := Parse([]byte(y), "/r/x.yaml"); err == nil || !strings.Contains(err.Error(), "comand") {
		t.Errorf("misspelt key: %v", err)
	}
}
