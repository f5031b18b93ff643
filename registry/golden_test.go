package registry

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"orkpipe/registry/regtest"
)

var update = flag.Bool("update", false, "rewrite golden files and fuzz seeds under testdata/")

// TestManifestGolden pins the manifest of a fixed build: any change to the layout, annotations,
// compression decision or encoder output shows up as a diff (rewrite with -update after review).
func TestManifestGolden(t *testing.T) {
	reg := regtest.Start(t, nil)
	res, err := Push(ctxT(t), buildDir(t), reg.Ref("packs/golden", "v1"), plain(reg), testRange, WithAnnotator(PackAnnotator))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "manifest.golden.json")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(golden, res.Artifact.Raw, 0o644); err != nil {
			t.Fatal(err)
		}
		seed := filepath.Join("testdata", "fuzz", "FuzzParseManifest", "golden")
		os.MkdirAll(filepath.Dir(seed), 0o755)
		if err := os.WriteFile(seed, []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", res.Artifact.Raw)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, res.Artifact.Raw) {
		t.Errorf("manifest differs from %s:\ngot  %s\nwant %s", golden, res.Artifact.Raw, want)
	}
}
