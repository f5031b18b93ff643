package registry

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"orkpipe/artifacts"
	"orkpipe/registry/oci"
	"orkpipe/registry/regtest"
)

// editManifest decodes raw, lets edit change it, and puts the result at ref (as an attacker with
// push access to the tag would).
func editManifest(t *testing.T, raw []byte, ref string, edit func(m *v1.Manifest)) {
	t.Helper()
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	putRaw(t, ref, b, types.OCIManifestSchema1)
}

// TestPullBlobLongerThanLayer is probe finding F6: a raw layer whose size (and file size) is one
// byte short of its blob, with the BLAKE3 of that prefix, was pulled as the prefix and reported
// with the whole blob's sha256. The registry's Content-Range total now has to be the layer's size.
func TestPullBlobLongerThanLayer(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	text := []byte(strings.Repeat("a summary line\n", 70) + "!")
	if err := os.WriteFile(filepath.Join(src, "summary.txt"), text, 0o644); err != nil {
		t.Fatal(err)
	}
	writeProvenance(t, src)
	res, err := Push(ctx, src, reg.Ref("packs/prefix", "v1"), plain(reg))
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Ref("packs/prefix", "short")
	short := int64(len(text) - 1)
	editManifest(t, res.Artifact.Raw, ref, func(m *v1.Manifest) {
		l := layerOf(t, m, "summary.txt")
		l.Size = short
		l.Annotations[AnnotationFileSize] = strconv.FormatInt(short, 10)
		l.Annotations[AnnotationFileBLAKE3] = artifacts.SumBytes(text[:short]).String()
		meta := fileMetadata{}
		json.Unmarshal([]byte(l.Annotations[AnnotationFileMetadata]), &meta)
		meta.Size = short
		b, _ := json.Marshal(meta)
		l.Annotations[AnnotationFileMetadata] = string(b)
	})
	dst := filepath.Join(t.TempDir(), "out")
	_, err = Pull(ctx, ref, dst, plain(reg))
	if !errors.Is(err, oci.ErrBlobSize) || !strings.Contains(err.Error(), "summary.txt") || !strings.Contains(err.Error(), "is 1051 bytes") {
		t.Fatalf("pull of a layer one byte short of its blob: %v, want ErrBlobSize naming the file and the blob's length", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "summary.txt")); !os.IsNotExist(err) {
		t.Errorf("summary.txt written: %v", err)
	}
}
