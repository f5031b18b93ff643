package recipe

import (
	"errors"
	"fmt"
	"strings"

	"orkpipe/artifacts"
	"orkpipe/ork/board"
)

// BoardVerify requires that the built pack was verified and run on a board host, as proven by a
// board verification attestation (`orkpipe verify REF --run ... --attest REF --sign KEY`) attached
// to the artifact at Ref. Its fields are exactly what such an attestation proves
// (pipelines/verify.ParamsOf): the board profile, the host fingerprint digest, the run program
// digest (program and every shared object it maps), the run command template, and the pack, stub
// and text the run used (the pack and stub are this build's outputs, Text is the file named here).
// The attestation must be signed by the key in Trust. The build never runs the board command: a
// requirement no attestation matches fails the build, naming each attestation seen and why it did
// not match.
type BoardVerify struct {
	Ref         string `yaml:"ref" json:"ref"`                 // REGISTRY/REPO:TAG (or @sha256:...) of the pushed build
	Board       string `yaml:"board" json:"board"`             // board profile name (default: the recipe's board when it is a name)
	Command     string `yaml:"command" json:"command"`         // the --run command template, verbatim ({pack}, {stub}, {text})
	Text        string `yaml:"text" json:"text"`               // the evaluation text of the run (default: screen.text)
	Fingerprint string `yaml:"fingerprint" json:"fingerprint"` // blake3: digest of the board host's fingerprint
	Program     string `yaml:"program" json:"program"`         // blake3: digest of the run program's closure
	Trust       string `yaml:"trust" json:"trust"`             // ed25519 public key file the attestation must be signed with
}

// validate checks the requirement and fills Board and Text from the recipe's board and screen.
func (b *BoardVerify) validate(r *Recipe) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("board_verify."+format, a...)) }
	if b.Ref == "" {
		bad("ref: the artifact reference the attestation is attached to is required (REGISTRY/REPO:TAG)")
	} else if !validRef(b.Ref) {
		bad("ref: %q: want REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:DIGEST", b.Ref)
	}
	if b.Board == "" {
		if _, ok := board.Builtin(r.Board); !ok {
			bad("board: required because the recipe's board is a profile file (%s): give the profile name the board verified with", r.Board)
		}
		b.Board = r.Board
	}
	if b.Command == "" {
		bad("command: the run command template the board ran (verify --run) is required")
	}
	if b.Text == "" {
		if r.Screen == nil || r.Screen.Text == "" {
			bad("text: required when the recipe has no screen.text (the evaluation text of the board run)")
		} else {
			b.Text = r.Screen.Text
		}
	}
	for _, f := range []struct{ name, v string }{{"fingerprint", b.Fingerprint}, {"program", b.Program}} {
		if _, err := artifacts.ParseDigest(f.v); err != nil {
			bad("%s: %v (want the blake3: digest listed by `orkpipe describe REF`)", f.name, err)
		}
	}
	if b.Trust == "" {
		bad("trust: a public key file is required: only an attestation signed by it satisfies the requirement")
	}
	return errors.Join(errs...)
}

// validRef accepts REGISTRY/REPO:TAG and REGISTRY/REPO@ALG:HEX without whitespace.
func validRef(ref string) bool {
	if strings.ContainsAny(ref, " \t\n") {
		return false
	}
	host, rest, ok := strings.Cut(ref, "/")
	if !ok || host == "" || rest == "" {
		return false
	}
	if repo, dig, ok := strings.Cut(rest, "@"); ok {
		return repo != "" && strings.Contains(dig, ":")
	}
	i := strings.LastIndex(rest, ":")
	return i > 0 && i < len(rest)-1
}
