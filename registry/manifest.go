package registry

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"orkpipe/artifacts"
)

// ModelInfo holds the ModelPack descriptor/config fields and the orkpipe manifest annotations.
type ModelInfo struct {
	Name         string `json:"name,omitempty"`
	Version      string `json:"version,omitempty"`
	Revision     string `json:"revision,omitempty"`
	Architecture string `json:"architecture,omitempty"`
	ParamSize    string `json:"paramSize,omitempty"`
	Precision    string `json:"precision,omitempty"`
	Quantization string `json:"quantization,omitempty"`
	BoardProfile string `json:"boardProfile,omitempty"`
	Recipe       string `json:"recipe,omitempty"` // recipe digest, blake3:<hex>
}

// ModelConfig is the ModelPack config blob (application/vnd.cncf.model.config.v1+json).
type ModelConfig struct {
	Descriptor struct {
		CreatedAt *time.Time `json:"createdAt,omitempty"`
		Name      string     `json:"name,omitempty"`
		Version   string     `json:"version,omitempty"`
		Revision  string     `json:"revision,omitempty"`
	} `json:"descriptor"`
	Config struct {
		Architecture string `json:"architecture,omitempty"`
		Format       string `json:"format"`
		ParamSize    string `json:"paramSize,omitempty"`
		Precision    string `json:"precision,omitempty"`
		Quantization string `json:"quantization,omitempty"`
	} `json:"config"`
	ModelFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diffIds"`
	} `json:"modelfs"`
}

// Part is one layer: the bytes of Extents of its file, concatenated, possibly zstd-compressed.
type Part struct {
	Index     int
	Extents   []Extent
	RawSize   int64  // sum of the extents' lengths
	RawSHA256 string // sha256 of the uncompressed bytes (the ModelPack diffID)
	Layer     v1.Descriptor
}

// Compressed reports whether the layer is zstd-compressed.
func (p Part) Compressed() bool { return strings.HasSuffix(string(p.Layer.MediaType), SuffixZstd) }

// File is one file of an artifact and the layers that carry it.
type File struct {
	Name      string
	MediaType string // MediaTypeWeightRaw or MediaTypeDocRaw (without +zstd)
	Digests   FileDigests
	Parts     []Part
	// Extra holds the dev.orkpipe.* layer annotations that are not part of the layout (e.g. pack version).
	Extra map[string]string
}

// DataSize is the number of file bytes carried by layers (the non-hole bytes).
func (f File) DataSize() int64 {
	var n int64
	for _, p := range f.Parts {
		n += p.RawSize
	}
	return n
}

// StoredSize is the number of bytes the layers occupy in the registry.
func (f File) StoredSize() int64 {
	var n int64
	for _, p := range f.Parts {
		n += p.Layer.Size
	}
	return n
}

// Artifact is a parsed, validated orkpipe manifest.
type Artifact struct {
	Digest      v1.Hash // sha256 of Raw
	Raw         []byte
	Manifest    v1.Manifest
	Created     time.Time
	Annotations map[string]string
	Files       []File
}

// layerAnnotations returns the annotations of part p of file f.
func layerAnnotations(f File, p Part) (map[string]string, error) {
	ext := make([][2]int64, len(p.Extents))
	for i, e := range p.Extents {
		ext[i] = [2]int64{e.Off, e.Len}
	}
	b, err := json.Marshal(ext)
	if err != nil {
		return nil, err
	}
	a := map[string]string{}
	for k, v := range f.Extra {
		a[k] = v
	}
	a[AnnotationFilepath] = f.Name
	a[AnnotationFileSize] = strconv.FormatInt(f.Digests.Size, 10)
	if f.Digests.SHA256 != "" { // push always has both; only a re-encoded foreign manifest lacks one
		a[AnnotationFileSHA256] = f.Digests.SHA256
	}
	if !f.Digests.BLAKE3.IsZero() {
		a[AnnotationFileBLAKE3] = f.Digests.BLAKE3.String()
	}
	a[AnnotationPart] = fmt.Sprintf("%d/%d", p.Index, len(f.Parts))
	a[AnnotationPartExtents] = string(b)
	a[AnnotationPartSHA256] = p.RawSHA256
	return a, nil
}

// layoutKeys are the layer annotations interpreted by parseManifest; any other dev.orkpipe.* key is Extra.
var layoutKeys = map[string]bool{
	AnnotationFilepath: true, AnnotationFileSize: true, AnnotationFileSHA256: true, AnnotationFileBLAKE3: true,
	AnnotationPart: true, AnnotationPartExtents: true, AnnotationPartSHA256: true,
}

// ParseManifest parses and validates an orkpipe pack manifest. It checks everything a pull relies
// on: media types, file names (plain names, no path separators), part numbering, extents (sorted,
// disjoint, inside the file), per-file digests agreeing across layers, and layer sizes. The
// whole-file sha256 and BLAKE3 annotations are optional (validated when present); a missing one
// is zero in File.Digests. It never
// trusts the registry: every later byte is checked against what this returns.
func ParseManifest(raw []byte) (*Artifact, error) {
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidManifest, fmt.Sprintf(format, a...))
	}
	if m.SchemaVersion != 2 || string(m.MediaType) != MediaTypeOCIManifest {
		return nil, bad("schemaVersion %d mediaType %q, want 2 and %q", m.SchemaVersion, m.MediaType, MediaTypeOCIManifest)
	}
	if m.ArtifactType != ArtifactTypeModel {
		return nil, bad("artifactType %q, want %q", m.ArtifactType, ArtifactTypeModel)
	}
	if string(m.Config.MediaType) != MediaTypeModelConfig {
		return nil, bad("config mediaType %q, want %q", m.Config.MediaType, MediaTypeModelConfig)
	}
	if v := m.Annotations[AnnotationFormat]; v != FormatVersion {
		return nil, bad("annotation %s = %q, want %q", AnnotationFormat, v, FormatVersion)
	}
	a := &Artifact{Raw: raw, Manifest: m, Annotations: m.Annotations}
	h, _, err := v1.SHA256(strings.NewReader(string(raw)))
	if err != nil {
		return nil, err
	}
	a.Digest = h
	if c := m.Annotations[AnnotationCreated]; c != "" {
		t, err := time.Parse(time.RFC3339Nano, c)
		if err != nil {
			return nil, bad("annotation %s = %q: %v", AnnotationCreated, c, err)
		}
		a.Created = t
	}
	byName := map[string]*File{}
	var order []string
	for i, l := range m.Layers {
		where := fmt.Sprintf("layer %d (%s)", i, l.Digest)
		if l.Digest.Algorithm != "sha256" || len(l.Digest.Hex) != 64 || l.Size < 0 {
			return nil, bad("%s: digest must be sha256 and size non-negative", where)
		}
		mt := strings.TrimSuffix(string(l.MediaType), SuffixZstd)
		if mt != MediaTypeWeightRaw && mt != MediaTypeDocRaw {
			return nil, bad("%s: mediaType %q is not a ModelPack weight or doc raw layer", where, l.MediaType)
		}
		la := l.Annotations
		name := la[AnnotationFilepath]
		if err := validName(name); err != nil {
			return nil, bad("%s: %s: %v", where, AnnotationFilepath, err)
		}
		var fd FileDigests
		if fd.Size, err = strconv.ParseInt(la[AnnotationFileSize], 10, 64); err != nil || fd.Size < 0 {
			return nil, bad("%s: %s = %q, want a non-negative integer", where, AnnotationFileSize, la[AnnotationFileSize])
		}
		// The whole-file digests may be absent (a manifest from another tool); present, they must be
		// well-formed. Pull verifies with the strongest one present (see Verification).
		if v, ok := la[AnnotationFileSHA256]; ok {
			if fd.SHA256 = v; !validSHA256(v) {
				return nil, bad("%s: %s = %q, want sha256:<64 hex>", where, AnnotationFileSHA256, v)
			}
		}
		if v, ok := la[AnnotationFileBLAKE3]; ok {
			if fd.BLAKE3, err = artifacts.ParseDigest(v); err != nil {
				return nil, bad("%s: %s: %v", where, AnnotationFileBLAKE3, err)
			}
			if fd.BLAKE3.IsZero() { // the zero digest stands for "absent"; no real content hashes to it
				return nil, bad("%s: %s = %q is all zeros", where, AnnotationFileBLAKE3, v)
			}
		}
		var idx, count int
		if _, err := fmt.Sscanf(la[AnnotationPart], "%d/%d", &idx, &count); err != nil ||
			la[AnnotationPart] != fmt.Sprintf("%d/%d", idx, count) || idx < 0 || idx >= count {
			return nil, bad("%s: %s = %q, want INDEX/COUNT", where, AnnotationPart, la[AnnotationPart])
		}
		p := Part{Index: idx, Layer: l, RawSHA256: la[AnnotationPartSHA256]}
		if !validSHA256(p.RawSHA256) {
			return nil, bad("%s: %s = %q, want sha256:<64 hex>", where, AnnotationPartSHA256, p.RawSHA256)
		}
		var ext [][2]int64
		if err := json.Unmarshal([]byte(la[AnnotationPartExtents]), &ext); err != nil || (len(ext) == 0 && count != 1) {
			return nil, bad("%s: %s = %q, want a JSON list of [offset,length] (empty only for a file without data)", where, AnnotationPartExtents, la[AnnotationPartExtents])
		}
		for _, e := range ext {
			if e[0] < 0 || e[1] <= 0 || e[0] > fd.Size-e[1] {
				return nil, bad("%s: extent [%d,%d] outside file of %d bytes", where, e[0], e[1], fd.Size)
			}
			if n := len(p.Extents); n > 0 && p.Extents[n-1].End() > e[0] {
				return nil, bad("%s: extents not sorted and disjoint", where)
			}
			p.Extents = append(p.Extents, Extent{Off: e[0], Len: e[1]})
			p.RawSize += e[1]
		}
		if !p.Compressed() && l.Size != p.RawSize {
			return nil, bad("%s: uncompressed layer of %d bytes carries extents of %d bytes", where, l.Size, p.RawSize)
		}
		f := byName[name]
		if f == nil {
			f = &File{Name: name, MediaType: mt, Digests: fd, Parts: make([]Part, count), Extra: map[string]string{}}
			for k, v := range la {
				if !layoutKeys[k] {
					f.Extra[k] = v
				}
			}
			byName[name] = f
			order = append(order, name)
		}
		if f.Digests != fd || len(f.Parts) != count || f.MediaType != mt {
			return nil, bad("%s: file %q described differently by its layers", where, name)
		}
		if f.Parts[idx].RawSHA256 != "" {
			return nil, bad("%s: file %q part %d appears twice", where, name, idx)
		}
		f.Parts[idx] = p
	}
	sort.Strings(order)
	for _, name := range order {
		f := byName[name]
		end := int64(0)
		for i, p := range f.Parts {
			if p.RawSHA256 == "" {
				return nil, bad("file %q: part %d of %d missing", name, i, len(f.Parts))
			}
			if len(p.Extents) > 0 && p.Extents[0].Off < end {
				return nil, bad("file %q: part %d overlaps part %d", name, i, i-1)
			}
			if len(p.Extents) > 0 {
				end = p.Extents[len(p.Extents)-1].End()
			}
		}
		a.Files = append(a.Files, *f)
	}
	return a, nil
}

// File returns the file named name.
func (a *Artifact) File(name string) (File, bool) {
	for _, f := range a.Files {
		if f.Name == name {
			return f, true
		}
	}
	return File{}, false
}

func validSHA256(s string) bool {
	h, err := v1.NewHash(s)
	return err == nil && h.Algorithm == "sha256" && len(h.Hex) == 64 && strings.ToLower(h.Hex) == h.Hex
}

// validName accepts a plain file name: no separators, not hidden, not "." or "..", printable.
func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty file name")
	case len(name) > 255:
		return fmt.Errorf("file name longer than 255 bytes")
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("file name %q starts with a dot", name)
	case strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("file name %q contains a path separator or NUL", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("file name %q contains a control character", name)
		}
	}
	return nil
}
