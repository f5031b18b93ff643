package registry

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
)

// ModelInfo holds the ModelPack descriptor/config fields and the orkpipe manifest annotations.
type ModelInfo struct {
	Name         string `json:"name,omitempty"`
	Version      string `json:"version,omitempty"`
	Revision     string `json:"revision,omitempty"`
	Family       string `json:"family,omitempty"`
	Author       string `json:"author,omitempty"` // the config's authors (one entry)
	Vendor       string `json:"vendor,omitempty"`
	License      string `json:"license,omitempty"` // the config's licenses (one SPDX expression)
	Description  string `json:"description,omitempty"`
	DocURL       string `json:"docURL,omitempty"`
	SourceURL    string `json:"sourceURL,omitempty"`
	Architecture string `json:"architecture,omitempty"`
	ParamSize    string `json:"paramSize,omitempty"`
	Precision    string `json:"precision,omitempty"`
	Quantization string `json:"quantization,omitempty"`
	BoardProfile string `json:"boardProfile,omitempty"`
	Recipe       string `json:"recipe,omitempty"` // recipe digest, blake3:<hex>
}

// ModelConfig is the ModelPack config blob (application/vnd.cncf.model.config.v1+json): the
// fields of model-spec's specs-go/v1 Model that orkpipe fills, and no others (its schema allows
// no additional properties).
type ModelConfig struct {
	Descriptor struct {
		CreatedAt   *time.Time `json:"createdAt,omitempty"`
		Authors     []string   `json:"authors,omitempty"`
		Family      string     `json:"family,omitempty"`
		Name        string     `json:"name,omitempty"`
		DocURL      string     `json:"docURL,omitempty"`
		SourceURL   string     `json:"sourceURL,omitempty"`
		Version     string     `json:"version,omitempty"`
		Revision    string     `json:"revision,omitempty"`
		Vendor      string     `json:"vendor,omitempty"`
		Licenses    []string   `json:"licenses,omitempty"`
		Description string     `json:"description,omitempty"`
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

// Artifact is a parsed, validated orkpipe manifest.
type Artifact struct {
	Digest      v1.Hash // sha256 of Raw
	Raw         []byte
	Manifest    v1.Manifest
	Created     time.Time
	Annotations map[string]string
	Files       []File // in layer order (by name)
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

// fileMetadata is the value of org.cncf.model.file.metadata+json (model-spec's FileMetadata):
// what the tar form's header says, for clients that restore it on raw layers.
type fileMetadata struct {
	Name     string    `json:"name"`
	Mode     uint32    `json:"mode"`
	UID      uint32    `json:"uid"`
	GID      uint32    `json:"gid"`
	Size     int64     `json:"size"`
	ModTime  time.Time `json:"mtime"`
	Typeflag byte      `json:"typeflag"`
}

// layerAnnotations returns the annotations of f's layer.
func layerAnnotations(f File) (map[string]string, error) {
	meta, err := json.Marshal(fileMetadata{Name: f.Name, Mode: sparse.TarMode, Size: f.Digests.Size, ModTime: time.Unix(0, 0).UTC(), Typeflag: '0'})
	if err != nil {
		return nil, err
	}
	a := map[string]string{}
	for k, v := range f.Extra {
		a[k] = v
	}
	a[AnnotationFilepath] = f.Name
	a[AnnotationTitle] = f.Title()
	a[AnnotationFileMetadata] = string(meta)
	a[AnnotationFileSize] = strconv.FormatInt(f.Digests.Size, 10)
	a[AnnotationFileSHA256] = f.Digests.SHA256
	a[AnnotationFileBLAKE3] = f.Digests.BLAKE3.String()
	if sparse.HasHoles(f.Digests.Size, f.Extents) {
		a[AnnotationFileExtents] = extentsJSON(f.Extents)
	}
	if f.RangeSize != 0 {
		cvs := make([]string, len(f.Ranges))
		stored := make([]Extent, len(f.Ranges))
		for k, r := range f.Ranges {
			cvs[k] = cvHex(r.CV)
			stored[k] = r.Stored
		}
		a[AnnotationRangeSize] = strconv.FormatInt(f.RangeSize, 10)
		a[AnnotationRangeBLAKE3] = strings.Join(cvs, ",")
		if f.Form != FormRaw {
			a[AnnotationRangeStored] = extentsJSON(stored)
		}
	}
	return a, nil
}

// emptySHA256 is the sha256 of no bytes: the digest of an empty raw layer.
const emptySHA256 = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// layoutKeys are the layer annotations the layout defines; any other dev.orkpipe.* key is Extra.
var layoutKeys = map[string]bool{
	AnnotationFilepath: true, AnnotationTitle: true, AnnotationFileMetadata: true,
	AnnotationFileSize: true, AnnotationFileSHA256: true, AnnotationFileBLAKE3: true, AnnotationFileExtents: true,
	AnnotationRangeSize: true, AnnotationRangeBLAKE3: true, AnnotationRangeStored: true,
}

func extentsJSON(exts []Extent) string {
	pairs := make([][2]int64, len(exts))
	for i, e := range exts {
		pairs[i] = [2]int64{e.Off, e.Len}
	}
	b, _ := json.Marshal(pairs) // pairs of integers always marshal
	return string(b)
}

func parseExtents(s string) ([]Extent, error) {
	var pairs [][2]int64
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pairs); err != nil || dec.More() {
		return nil, fmt.Errorf("want a JSON list of [offset,length], got %q", s)
	}
	out := make([]Extent, len(pairs))
	for i, p := range pairs {
		out[i] = Extent{Off: p[0], Len: p[1]}
	}
	return out, nil
}

// cvHex is the text form of a chaining value: its 32 bytes (little-endian words), hex.
func cvHex(cv artifacts.ChainValue) string {
	var b [32]byte
	for i, w := range cv {
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(w), byte(w>>8), byte(w>>16), byte(w>>24)
	}
	return hex.EncodeToString(b[:])
}

func parseCV(s string) (artifacts.ChainValue, error) {
	var cv artifacts.ChainValue
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 || strings.ToLower(s) != s {
		return cv, fmt.Errorf("chaining value %q: want 64 lowercase hex digits", s)
	}
	for i := range cv {
		cv[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	}
	return cv, nil
}

// ParseManifest parses and validates an orkpipe pack manifest (layout 2). It checks everything a
// pull relies on: media types (ModelPack's), one layer per file with a plain name and the title a
// client writes it to, the whole-file digests, data extents (sorted, disjoint, inside the file),
// the ranges (size, chaining values, where each is stored), and for a raw layer that its digest
// and size are the file's. It never trusts the registry: every later byte is checked against what
// this returns. A manifest of the previous layout (1) is refused with a message saying how to
// re-push it.
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
	switch v, ok := m.Annotations[AnnotationFormat]; {
	case v == FormatVersion:
	case v == formatV1:
		return nil, fmt.Errorf("%w: the artifact uses orkpipe's layout 1 (files split over several layers, media types outside ModelPack's list), which this orkpipe does not read: push the build directory again with this orkpipe (orkpipe push DIR REF), or pull it with an orkpipe built before layout 2", ErrOldLayout)
	case !ok:
		return nil, bad("no %s annotation: not an orkpipe artifact (a ModelPack client or oras pull reads any ModelPack artifact)", AnnotationFormat)
	default:
		return nil, bad("annotation %s = %q, want %q (a newer orkpipe wrote it?)", AnnotationFormat, v, FormatVersion)
	}
	a := &Artifact{Raw: raw, Manifest: m, Annotations: m.Annotations}
	h, _, err := v1.SHA256(bytes.NewReader(raw))
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
	seen := map[string]bool{}
	for i, l := range m.Layers {
		f, err := parseLayer(l)
		if err != nil {
			return nil, bad("layer %d (%s): %v", i, l.Digest, err)
		}
		if seen[f.Name] {
			return nil, bad("layer %d (%s): file %q appears twice", i, l.Digest, f.Name)
		}
		seen[f.Name] = true
		a.Files = append(a.Files, f)
	}
	if !sort.SliceIsSorted(a.Files, func(i, j int) bool { return a.Files[i].Name < a.Files[j].Name }) {
		return nil, bad("layers are not in file-name order")
	}
	return a, nil
}

// parseLayer validates one layer and returns the file it carries.
func parseLayer(l v1.Descriptor) (File, error) {
	var f File
	if l.Digest.Algorithm != "sha256" || !validSHA256(l.Digest.String()) || l.Size < 0 {
		return f, errors.New("digest must be sha256:<64 lowercase hex> and size non-negative")
	}
	mt := string(l.MediaType)
	rest, ok := strings.CutPrefix(mt, mediaTypePrefix)
	class, form, ok2 := strings.Cut(rest, ".v1.")
	f.Class, f.Form = class, Form(form)
	if !ok || !ok2 || (class != ClassWeight && class != ClassDoc) || (f.Form != FormRaw && f.Form != FormTar && f.Form != FormTarZstd) {
		return f, fmt.Errorf("mediaType %q: want a ModelPack weight or doc layer, raw, tar or tar+zstd", mt)
	}
	la := l.Annotations
	f.Name = la[AnnotationFilepath]
	if err := validName(f.Name); err != nil {
		return f, fmt.Errorf("%s: %w", AnnotationFilepath, err)
	}
	if t := la[AnnotationTitle]; t != f.Title() {
		return f, fmt.Errorf("%s = %q, want %q for a %s layer of %s", AnnotationTitle, t, f.Title(), f.Form, f.Name)
	}
	var err error
	d := &f.Digests
	if d.Size, err = strconv.ParseInt(la[AnnotationFileSize], 10, 64); err != nil || d.Size < 0 || strconv.FormatInt(d.Size, 10) != la[AnnotationFileSize] {
		return f, fmt.Errorf("%s = %q, want a non-negative integer", AnnotationFileSize, la[AnnotationFileSize])
	}
	if d.SHA256 = la[AnnotationFileSHA256]; !validSHA256(d.SHA256) {
		return f, fmt.Errorf("%s = %q, want sha256:<64 lowercase hex>", AnnotationFileSHA256, d.SHA256)
	}
	if d.BLAKE3, err = artifacts.ParseDigest(la[AnnotationFileBLAKE3]); err != nil {
		return f, fmt.Errorf("%s: %w", AnnotationFileBLAKE3, err)
	}
	f.Extents = fullExtents(d.Size)
	if v, ok := la[AnnotationFileExtents]; ok {
		if f.Extents, err = parseExtents(v); err != nil {
			return f, fmt.Errorf("%s: %w", AnnotationFileExtents, err)
		}
		if !sparse.HasHoles(d.Size, f.Extents) {
			return f, fmt.Errorf("%s lists no hole: a file without holes has no such annotation", AnnotationFileExtents)
		}
	}
	var end int64
	for _, e := range f.Extents {
		if e.Off < end || e.Len <= 0 || e.Off > d.Size-e.Len {
			return f, fmt.Errorf("extent [%d,+%d): extents must be sorted, disjoint, non-empty and inside the file's %d bytes", e.Off, e.Len, d.Size)
		}
		end = e.End()
	}
	if f.Form == FormRaw && (l.Digest.String() != d.SHA256 || l.Size != d.Size) {
		return f, fmt.Errorf("a raw layer is the file itself, but its digest and size (%s, %d) are not the file's (%s, %d)", l.Digest, l.Size, d.SHA256, d.Size)
	}
	if f.Form == FormRaw && d.Size == 0 && d.SHA256 != emptySHA256 {
		// Nothing is fetched for an empty raw file, so nothing would show that the blob is not empty.
		return f, fmt.Errorf("an empty raw layer's digest must be %s, not %s", emptySHA256, d.SHA256)
	}
	f.Layer = v1.Descriptor{MediaType: types.MediaType(mt), Size: l.Size, Digest: l.Digest, Annotations: la}
	if err := parseRanges(&f, la); err != nil {
		return f, err
	}
	f.Extra = map[string]string{}
	for k, v := range la {
		if !layoutKeys[k] && strings.HasPrefix(k, "dev.orkpipe.") {
			f.Extra[k] = v
		}
	}
	return f, nil
}

// parseRanges reads the range annotations of f's layer (absent for a one-range file).
func parseRanges(f *File, la map[string]string) error {
	size := f.Digests.Size
	sizeStr, multi := la[AnnotationRangeSize]
	if !multi {
		if _, ok := la[AnnotationRangeBLAKE3]; ok {
			return fmt.Errorf("%s without %s", AnnotationRangeBLAKE3, AnnotationRangeSize)
		}
		if _, ok := la[AnnotationRangeStored]; ok {
			return fmt.Errorf("%s without %s", AnnotationRangeStored, AnnotationRangeSize)
		}
		f.Ranges = []Range{{Off: 0, Len: size, Stored: Extent{Off: 0, Len: f.Layer.Size}}}
		return f.checkRanges()
	}
	rs, err := strconv.ParseInt(sizeStr, 10, 64)
	if err != nil || !ValidRangeSize(rs) || rs >= size || strconv.FormatInt(rs, 10) != sizeStr {
		return fmt.Errorf("%s = %q: want a power of two of at least %d bytes, smaller than the file's %d", AnnotationRangeSize, sizeStr, artifacts.PieceSize, size)
	}
	// The values are counted before the ranges are made: a file size far beyond what the
	// manifest lists values for must not allocate its ranges.
	cvs := strings.Split(la[AnnotationRangeBLAKE3], ",")
	if n := (size + rs - 1) / rs; int64(len(cvs)) != n {
		return fmt.Errorf("%s holds %d values for %d ranges", AnnotationRangeBLAKE3, len(cvs), n)
	}
	f.RangeSize = rs
	f.Ranges = rangesOf(size, rs)
	for k := range f.Ranges {
		if f.Ranges[k].CV, err = parseCV(cvs[k]); err != nil {
			return fmt.Errorf("%s: range %d: %w", AnnotationRangeBLAKE3, k, err)
		}
	}
	if f.Form == FormRaw {
		if _, ok := la[AnnotationRangeStored]; ok {
			return fmt.Errorf("%s on a raw layer (its ranges are stored at their file offsets)", AnnotationRangeStored)
		}
		for k := range f.Ranges {
			f.Ranges[k].Stored = Extent{Off: f.Ranges[k].Off, Len: f.Ranges[k].Len}
		}
	} else {
		stored, err := parseExtents(la[AnnotationRangeStored])
		if err != nil {
			return fmt.Errorf("%s: %w", AnnotationRangeStored, err)
		}
		if len(stored) != len(f.Ranges) {
			return fmt.Errorf("%s holds %d ranges, want %d", AnnotationRangeStored, len(stored), len(f.Ranges))
		}
		for k := range f.Ranges {
			f.Ranges[k].Stored = stored[k]
		}
	}
	if err := f.checkRanges(); err != nil {
		return err
	}
	root, err := artifacts.RootDigest(rangeCVs(*f))
	if err != nil {
		return err
	}
	if root != f.Digests.BLAKE3 {
		return fmt.Errorf("the ranges' chaining values merge into %s, not the file's %s", root, f.Digests.BLAKE3)
	}
	return nil
}

func rangeCVs(f File) []artifacts.ChainValue {
	cvs := make([]artifacts.ChainValue, len(f.Ranges))
	for k, r := range f.Ranges {
		cvs[k] = r.CV
	}
	return cvs
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
