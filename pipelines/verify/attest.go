package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"orkpipe/ork/boardhost"
	"orkpipe/registry"
)

// PredicateType is the in-toto predicate type of a board verification attestation.
const PredicateType = "https://orkpipe.dev/board-verify/v1"

// Predicate is the predicate of a board verification attestation: which board profile the pack was
// checked against, and the report (boardhost JSON, see ork/boardhost), which carries the host
// fingerprint, the run program with every shared object and their digests, the inputs' digests and
// the scores.
type Predicate struct {
	Board   string          `json:"board"`   // board profile name
	Profile string          `json:"profile"` // BLAKE3 of the profile's canonical JSON
	Report  json.RawMessage `json:"report"`
}

// NewPredicate encodes the result's report as an attestation predicate.
func NewPredicate(res *Result) ([]byte, error) {
	rb, err := json.Marshal(res.Report)
	if err != nil {
		return nil, err
	}
	return json.Marshal(Predicate{Board: res.Profile.Name, Profile: res.Profile.Digest().String(), Report: rb})
}

// DecodePredicate decodes a predicate and verifies its report (boardhost.DecodeReport: format,
// "ok" against the checks, fingerprint and program digests against their parts).
func DecodePredicate(b []byte) (*Predicate, *boardhost.Report, error) {
	var p Predicate
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, nil, fmt.Errorf("board verification predicate: %w", err)
	}
	if p.Board == "" {
		return nil, nil, fmt.Errorf("board verification predicate: field \"board\" is empty")
	}
	rep, err := boardhost.DecodeReport(bytes.NewReader(p.Report))
	if err != nil {
		return nil, nil, fmt.Errorf("board verification predicate: field \"report\": %w", err)
	}
	return &p, rep, nil
}

// Attest attaches the result as a signed board-verification attestation to the artifact at ref
// (pass registry.WithSigner and the transport options). The artifact must carry the verified pack
// and stub with the same BLAKE3 as the report's inputs: a verification is never attached to another
// pack. It returns the attestation manifest digest.
func Attest(ctx context.Context, ref string, res *Result, opts ...registry.Option) (string, error) {
	if res == nil || res.Report == nil {
		return "", fmt.Errorf("%w: nothing to attest", ErrOption)
	}
	d, err := registry.Describe(ctx, ref, opts...)
	if err != nil {
		return "", err
	}
	for _, in := range res.Report.Inputs {
		var path string
		switch in.Role {
		case "pack":
			path = res.Files.Pack
		case "stub":
			path = res.Files.Stub
		default:
			continue
		}
		f, ok := d.Artifact.File(filepath.Base(path))
		if !ok {
			return "", fmt.Errorf("attest %s: the artifact has no file %s: it is not the pack that was verified", ref, filepath.Base(path))
		}
		if f.Digests.BLAKE3.IsZero() {
			return "", fmt.Errorf("attest %s: the artifact records no BLAKE3 for %s (not pushed by orkpipe?): it cannot be tied to the verified file %s", ref, f.Name, in.Digest)
		}
		if f.Digests.BLAKE3.String() != in.Digest {
			return "", fmt.Errorf("attest %s: %s is %s in the artifact but %s was verified", ref, f.Name, f.Digests.BLAKE3, in.Digest)
		}
	}
	pred, err := NewPredicate(res)
	if err != nil {
		return "", err
	}
	// Attached to the manifest checked above, by digest: the tag may have moved since (a push in
	// between, or a registry answering the two requests differently).
	return registry.Attach(ctx, pinned(ref, d.Artifact.Digest.String()), PredicateType, pred, opts...)
}

// pinned returns reference ref ([host[:port]/]path[:tag][@digest]) naming the manifest digest instead
// of its tag or digest.
func pinned(ref, digest string) string {
	repo, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i] // a tag (a colon before the last slash is a port)
	}
	return repo + "@" + digest
}

// Verification is one board verification found attached to an artifact: which board host verified
// it, with which binaries, and what it found.
type Verification struct {
	Attestation string             `json:"attestation"` // digest of the attestation manifest
	Signers     []string           `json:"signers,omitempty"`
	TrustedBy   []string           `json:"trusted_by,omitempty"`
	Error       string             `json:"error,omitempty"` // why it is unusable (bad signature, bad report)
	OK          bool               `json:"ok"`
	Board       string             `json:"board"`
	Host        string             `json:"host"`
	Kernel      string             `json:"kernel"`
	NPUDriver   string             `json:"npu_driver"`
	Fingerprint string             `json:"fingerprint"`
	Command     string             `json:"command,omitempty"`
	Program     string             `json:"program,omitempty"` // digest of the run program's closure
	Objects     []boardhost.Object `json:"objects,omitempty"` // the run binary and every shared object
	PPL         float64            `json:"ppl,omitempty"`
	Predicate   *Predicate         `json:"-"`
	Report      *boardhost.Report  `json:"-"`
}

// Verifications lists the board verifications attached to a described artifact. An attestation of
// this predicate type whose signature or report does not verify is listed with Error set.
func Verifications(d *registry.Description) []Verification {
	var out []Verification
	for _, a := range d.Attestations {
		if a.PredicateType != PredicateType {
			continue
		}
		v := Verification{Attestation: a.Digest.String(), Signers: a.Signers, TrustedBy: a.TrustedBy}
		if a.Err != nil {
			v.Error = a.Err.Error()
		}
		if a.Statement == nil {
			if v.Error == "" {
				v.Error = "no statement"
			}
			out = append(out, v)
			continue
		}
		p, rep, err := DecodePredicate(a.Statement.Predicate)
		if err != nil {
			v.Error = err.Error()
			out = append(out, v)
			continue
		}
		v.Predicate, v.Report = p, rep
		v.OK, v.Board = rep.OK(), p.Board
		if fp := rep.Fingerprint; fp != nil {
			v.Host, v.Kernel, v.NPUDriver, v.Fingerprint = fp.Machine.Hostname, fp.System.KernelRelease, fp.System.NPUDriver, fp.Digest()
		}
		if r := rep.Run; r != nil {
			v.Command = r.Command
			if r.Program != nil {
				v.Program, v.Objects = r.Program.Digest, r.Program.Objects
			}
			if r.Scores != nil {
				v.PPL = r.PPL
			}
		}
		out = append(out, v)
	}
	return out
}
