package stages

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// ProvenanceParams are the parameters of "provenance": an in-toto Statement v1 whose predicate is
// SLSA provenance v1. Subjects are bound as inputs "subject.<file name>" (the output files, with
// sha256 and BLAKE3); resolved dependencies as "dep.<name>" with the URI given here (source model,
// corpus, screen text, recipe; BLAKE3 digests as the store computed them). The orkpipe binary is the
// stage's tool "orkpipe": its digest is key material, so a new binary re-runs this node (and only
// this node), and the Go build info read from that file is recorded. Nothing time- or host-dependent
// is written, so the same key always gives the same bytes.
type ProvenanceParams struct {
	Name      string          `json:"name"`
	Subjects  []string        `json:"subjects"`
	Deps      []ProvenanceDep `json:"deps"`
	Recipe    json.RawMessage `json:"recipe"`
	Overrides []string        `json:"overrides"`
	// SHA256 names the subjects whose sha256 a "sha256" node computed: bound as input
	// "sha256.<subject>", checked to describe that subject (its BLAKE3 and size), never recomputed.
	// The others are hashed here.
	SHA256 []string `json:"sha256,omitempty"`
	// Model describes the packed model; written as externalParameters.model (see ProvenanceModel).
	Model *ProvenanceModel `json:"model,omitempty"`
}

// ProvenanceModel describes the model a build packed, for the artifact's readers: provenance.json
// carries it as predicate.buildDefinition.externalParameters.model, from which push fills the
// ModelPack config (descriptor name, family, authors, vendor, licenses, description, docURL,
// sourceURL; architecture, paramSize, precision, quantization) and the manifest's annotations
// (registry.ModelInfo reads the same JSON names). The planner fills it from the source's header
// (the general.* keys; docs/oci.md lists which key feeds which field) and the recipe; the stage
// adds Recipe, the BLAKE3 of the recipe file bound as dependency "recipe" (a build without a
// recipe file has none). Every field is optional: a header without the key leaves it empty.
type ProvenanceModel struct {
	Name         string `json:"name,omitempty"`
	Family       string `json:"family,omitempty"`      // general.basename
	Author       string `json:"author,omitempty"`      // general.author
	Vendor       string `json:"vendor,omitempty"`      // general.organization
	License      string `json:"license,omitempty"`     // general.license, as an SPDX expression
	Description  string `json:"description,omitempty"` // general.description
	DocURL       string `json:"docURL,omitempty"`      // general.url
	SourceURL    string `json:"sourceURL,omitempty"`   // general.repo_url
	Architecture string `json:"architecture,omitempty"`
	ParamSize    string `json:"paramSize,omitempty"`
	Precision    string `json:"precision,omitempty"`
	Quantization string `json:"quantization,omitempty"`
	BoardProfile string `json:"boardProfile,omitempty"`
	Recipe       string `json:"recipe,omitempty"`
}

// ProvenanceDep is one resolved dependency.
type ProvenanceDep struct {
	Name string `json:"name"`
	URI  string `json:"uri"`
}

// BuildType is the SLSA buildType of orkpipe recipe builds.
const BuildType = "https://orkpipe.dev/slsa/recipe-build/v1"

// ExecutablePath returns the path of the running orkpipe binary (the provenance tool).
var ExecutablePath = os.Executable

func init() {
	Register(Define("provenance", 2, func(p ProvenanceParams) (Spec, error) {
		if p.Name == "" || len(p.Subjects) == 0 {
			return Spec{}, fmt.Errorf("name and subjects are required")
		}
		if p.Model != nil && p.Model.Recipe != "" {
			return Spec{}, fmt.Errorf("model.recipe %q: the stage records the recipe file's digest itself (dependency \"recipe\"); leave it empty", p.Model.Recipe)
		}
		tool, err := orkpipeTool()
		if err != nil {
			return Spec{}, err
		}
		s := Spec{Outputs: []string{"provenance.json"}, PeakMemory: 32 << 20, Tools: []Tool{tool}}
		for _, sub := range p.Subjects {
			s.Inputs = append(s.Inputs, "subject."+sub)
		}
		for _, sub := range p.SHA256 {
			if !slices.Contains(p.Subjects, sub) {
				return Spec{}, fmt.Errorf("sha256: %q is not a subject", sub)
			}
			s.Inputs = append(s.Inputs, "sha256."+sub)
		}
		for _, d := range p.Deps {
			s.Inputs = append(s.Inputs, "dep."+d.Name)
		}
		return s, nil
	}, runProvenance))
}

// DigestSet maps a digest algorithm ("sha256", "blake3") to the hex digest.
type DigestSet map[string]string

// ResourceDescriptor is an in-toto ResourceDescriptor: a subject or a resolved dependency.
type ResourceDescriptor struct {
	Name        string         `json:"name"`
	URI         string         `json:"uri,omitempty"`
	Digest      DigestSet      `json:"digest"`
	Annotations map[string]any `json:"annotations,omitempty"`
}

// sha256File returns the hex sha256 of the file at path. Holes (a stub's pack-owned tensors) are
// hashed from a buffer of zeros rather than read: reading a hole copies zeros out of the kernel.
func sha256File(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	buf := make([]byte, 1<<20)
	zeros := make([]byte, 1<<20)
	fd, size := int(f.Fd()), st.Size()
	for off := int64(0); off < size; {
		// The next data segment [data, hole); a filesystem without SEEK_DATA reports one segment.
		data, hole := off, size
		if d, err := unix.Seek(fd, off, unix.SEEK_DATA); errors.Is(err, unix.ENXIO) {
			data = size
		} else if err == nil {
			data = min(d, size)
			if e, err := unix.Seek(fd, data, unix.SEEK_HOLE); err == nil {
				hole = min(e, size)
			}
		}
		for ; off < data; off += int64(min(len(zeros), int(data-off))) {
			h.Write(zeros[:min(len(zeros), int(data-off))])
		}
		for off < hole {
			if err := ctx.Err(); err != nil {
				return "", err
			}
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-off)], off)
			h.Write(buf[:n])
			off += int64(n)
			if n == 0 || (err != nil && !errors.Is(err, io.EOF)) {
				if err == nil || errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return "", fmt.Errorf("hashing %s at %d of %d bytes: %w", path, off, size, err)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func runProvenance(ctx context.Context, p ProvenanceParams, req Request) error {
	// The subjects' sha256 are computed side by side (sha256 is serial within a file).
	subjects := make([]ResourceDescriptor, len(p.Subjects))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, name := range p.Subjects {
		f := req.Inputs["subject."+name]
		g.Go(func() error {
			hash := func() (string, error) { return sha256File(gctx, f.Path) }
			if slices.Contains(p.SHA256, name) {
				hash = func() (string, error) { return readSHA256(req.Inputs["sha256."+name].Path, f) }
			}
			sum, err := hash()
			subjects[i] = ResourceDescriptor{Name: name, Digest: DigestSet{"sha256": sum, "blake3": f.Digest.Hex()}}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	deps := resolvedDeps(p.Deps, req)
	bin := deps[len(deps)-1]
	overrides := p.Overrides
	if overrides == nil {
		overrides = []string{}
	}
	params := map[string]any{"recipe": p.Recipe, "overrides": overrides, "name": p.Name}
	if p.Model != nil {
		m := *p.Model
		if f, ok := req.Inputs["dep.recipe"]; ok {
			m.Recipe = f.Digest.String()
		}
		params["model"] = m
	}
	stmt := map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       subjects,
		"predicateType": "https://slsa.dev/provenance/v1",
		"predicate": map[string]any{
			"buildDefinition": map[string]any{
				"buildType":            BuildType,
				"externalParameters":   params,
				"resolvedDependencies": deps,
			},
			"runDetails": map[string]any{
				"builder":  map[string]any{"id": "https://orkpipe.dev/builder/local", "version": map[string]any{"orkpipe": bin.Annotations["version"]}},
				"metadata": map[string]any{"invocationId": p.Name},
			},
		},
	}
	b, err := json.MarshalIndent(stmt, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(req.Output("provenance.json"), append(b, '\n'), 0o644)
}

// orkpipeTool is the tool entry of the stages that record the orkpipe binary (provenance, report):
// its digest is key material, so a new binary re-runs them.
func orkpipeTool() (Tool, error) {
	exe, err := ExecutablePath()
	if err != nil {
		return Tool{}, fmt.Errorf("locating the orkpipe binary: %w", err)
	}
	return Tool{Name: "orkpipe", Path: exe}, nil
}

// resolvedDeps describes the dependencies bound as inputs "dep.<name>" (sorted by name; BLAKE3 as
// the store computed it, and the size), then the orkpipe binary (tool "orkpipe") with what its Go
// build information says (version, VCS revision, build settings).
func resolvedDeps(list []ProvenanceDep, req Request) []ResourceDescriptor {
	var deps []ResourceDescriptor
	for _, d := range list {
		f := req.Inputs["dep."+d.Name]
		deps = append(deps, ResourceDescriptor{Name: d.Name, URI: d.URI, Digest: DigestSet{"blake3": f.Digest.Hex()},
			Annotations: map[string]any{"size": f.Size}})
	}
	sort.SliceStable(deps, func(i, j int) bool { return deps[i].Name < deps[j].Name })
	tool := req.Tools["orkpipe"]
	bin := ResourceDescriptor{Name: "orkpipe", Digest: DigestSet{"blake3": tool.Digest.Hex()}, Annotations: map[string]any{"size": tool.Size}}
	if bi, err := buildinfo.ReadFile(tool.Path); err == nil {
		bin.Annotations["go"] = bi.GoVersion
		bin.Annotations["module"] = bi.Main.Path
		bin.Annotations["version"] = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision", "vcs.time", "vcs.modified", "GOOS", "GOARCH", "CGO_ENABLED", "-tags":
				bin.Annotations[s.Key] = s.Value
			}
		}
	}
	return append(deps, bin)
}
