package registry

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"orkpipe/artifacts"
)

// goldenManifest returns the golden manifest (every form: raw, tar, tar+zstd; sparse and not;
// one range and several) decoded, for tests to edit.
func goldenManifest(t *testing.T) v1.Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "manifest.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// layerOf returns the layer of the named file in m.
func layerOf(t *testing.T, m *v1.Manifest, name string) *v1.Descriptor {
	t.Helper()
	for i := range m.Layers {
		if m.Layers[i].Annotations[AnnotationFilepath] == name {
			return &m.Layers[i]
		}
	}
	t.Fatalf("no layer for %s", name)
	return nil
}

// TestParseManifestRefuses edits the golden manifest one way at a time; each edit must be refused
// with an error naming what is wrong (and the untouched manifest must parse).
func TestParseManifestRefuses(t *testing.T) {
	golden := goldenManifest(t)
	raw, _ := json.Marshal(golden)
	if _, err := ParseManifest(raw); err != nil {
		t.Fatalf("golden manifest: %v", err)
	}
	const stub, text, pack = "model.orkpack.gguf", "sparse-text.gguf", "model.orkpack"
	cases := []struct {
		name string
		edit func(m *v1.Manifest)
		want string
	}{
		{"layout 1", func(m *v1.Manifest) { m.Annotations[AnnotationFormat] = "1" }, "push the build directory again"},
		{"no format", func(m *v1.Manifest) { delete(m.Annotations, AnnotationFormat) }, "not an orkpipe artifact"},
		{"a newer format", func(m *v1.Manifest) { m.Annotations[AnnotationFormat] = "3" }, "want \"2\""},
		{"not a model artifact", func(m *v1.Manifest) { m.ArtifactType = "application/vnd.example" }, "artifactType"},
		{"old raw+zstd media type", func(m *v1.Manifest) { layerOf(t, m, pack).MediaType = "application/vnd.cncf.model.weight.v1.raw+zstd" }, "ModelPack weight or doc layer"},
		{"tar+gzip (not written by orkpipe)", func(m *v1.Manifest) { layerOf(t, m, stub).MediaType = "application/vnd.cncf.model.weight.v1.tar+gzip" }, "ModelPack weight or doc layer"},
		{"a path in the name", func(m *v1.Manifest) { layerOf(t, m, pack).Annotations[AnnotationFilepath] = "sub/model.orkpack" }, "path separator"},
		{"title of a raw layer", func(m *v1.Manifest) { layerOf(t, m, pack).Annotations[AnnotationTitle] = "other" }, "want \"model.orkpack\""},
		{"title of a tar layer is the file's", func(m *v1.Manifest) { layerOf(t, m, stub).Annotations[AnnotationTitle] = stub }, "want \"model.orkpack.gguf.tar\""},
		{"no BLAKE3", func(m *v1.Manifest) { delete(layerOf(t, m, pack).Annotations, AnnotationFileBLAKE3) }, AnnotationFileBLAKE3},
		{"bad sha256", func(m *v1.Manifest) { layerOf(t, m, pack).Annotations[AnnotationFileSHA256] = "sha256:00" }, AnnotationFileSHA256},
		{"raw layer not the file", func(m *v1.Manifest) {
			l := layerOf(t, m, pack)
			l.Annotations[AnnotationFileSHA256] = "sha256:" + strings.Repeat("ab", 32)
		}, "raw layer is the file itself"},
		{"extent outside the file", func(m *v1.Manifest) {
			layerOf(t, m, stub).Annotations[AnnotationFileExtents] = "[[0,81920],[67104768,8192]]"
		}, "inside the file"},
		{"extents overlap", func(m *v1.Manifest) {
			layerOf(t, m, stub).Annotations[AnnotationFileExtents] = "[[0,81920],[40960,4096]]"
		}, "sorted, disjoint"},
		{"extents without a hole", func(m *v1.Manifest) { layerOf(t, m, pack).Annotations[AnnotationFileExtents] = "[[0,21053]]" }, "lists no hole"},
		{"range size not a power of two", func(m *v1.Manifest) { layerOf(t, m, stub).Annotations[AnnotationRangeSize] = "5000000" }, "power of two"},
		{"range size below a piece", func(m *v1.Manifest) { layerOf(t, m, stub).Annotations[AnnotationRangeSize] = "1048576" }, "power of two"},
		{"one chaining value missing", func(m *v1.Manifest) {
			a := layerOf(t, m, stub).Annotations
			a[AnnotationRangeBLAKE3] = a[AnnotationRangeBLAKE3][:strings.LastIndex(a[AnnotationRangeBLAKE3], ",")]
		}, "15 values for 16 ranges"},
		{"chaining values swapped", func(m *v1.Manifest) {
			a := layerOf(t, m, stub).Annotations
			cvs := strings.Split(a[AnnotationRangeBLAKE3], ",")
			cvs[0], cvs[15] = cvs[15], cvs[0]
			a[AnnotationRangeBLAKE3] = strings.Join(cvs, ",")
		}, "merge into"},
		{"a huge size, its ranges never made", func(m *v1.Manifest) { layerOf(t, m, stub).Annotations[AnnotationFileSize] = "4611686018427387904" }, "16 values for 1099511627776 ranges"},
		{"ranges on a one-range file", func(m *v1.Manifest) { layerOf(t, m, pack).Annotations[AnnotationRangeSize] = "4194304" }, "smaller than the file"},
		{"stored ranges with a gap", func(m *v1.Manifest) {
			layerOf(t, m, text).Annotations[AnnotationRangeStored] = "[[0,238278],[238279,0],[238279,475574],[713853,0],[713853,0],[713853,2127]]"
		}, "stored at"},
		{"stored ranges short of the blob", func(m *v1.Manifest) { layerOf(t, m, text).Size++ }, "the layer has"},
		{"a tar range stored in the wrong length", func(m *v1.Manifest) {
			layerOf(t, m, stub).Annotations[AnnotationRangeStored] = "[[0,608255],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,0],[608255,5121]]"
		}, "its part of the archive is"},
		{"a range of archive bytes stored in nothing", func(m *v1.Manifest) {
			layerOf(t, m, text).Annotations[AnnotationRangeStored] = "[[0,713853],[713853,0],[713853,0],[713853,0],[713853,0],[713853,2127]]"
		}, "stores nothing but holds"},
		{"stored ranges on a raw layer", func(m *v1.Manifest) {
			a := layerOf(t, m, "calib.txt").Annotations
			layerOf(t, m, "stories260K.gguf").Annotations[AnnotationRangeStored] = a[AnnotationRangeStored]
		}, AnnotationRangeStored + " without"},
		{"an empty raw file whose blob is not empty", func(m *v1.Manifest) {
			l := layerOf(t, m, pack)
			l.Size = 0
			l.Annotations[AnnotationFileSize] = "0"
			l.Annotations[AnnotationFileBLAKE3] = artifacts.SumBytes(nil).String()
		}, "empty raw layer's digest must be"},
		{"a file twice", func(m *v1.Manifest) { m.Layers = append(m.Layers, m.Layers[len(m.Layers)-1]) }, "appears twice"},
		{"layers out of order", func(m *v1.Manifest) { m.Layers[0], m.Layers[1] = m.Layers[1], m.Layers[0] }, "file-name order"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := goldenManifest(t)
			c.edit(&m)
			raw, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseManifest(raw)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalidManifest) && !errors.Is(err, ErrOldLayout) {
				t.Errorf("error does not wrap ErrInvalidManifest or ErrOldLayout: %v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}
