package registry

import (
	"os"
	"path/filepath"
	"testing"

	"orkpipe/registry/regtest"
)

// TestPullStateNames is probe finding F8: files named like the pull's state files (journal, lock)
// were assembled at the state files' own paths. They pull like any other file, also when resumed,
// and a partial file an older orkpipe left beside the journal is resumed from.
func TestPullStateNames(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "journal"), 9<<20, 11)
	writeRandom(t, filepath.Join(src, "lock"), 5<<20, 12)
	writeRandom(t, filepath.Join(src, "model.bin"), 9<<20, 13)
	writeProvenance(t, src)
	ref := reg.Ref("packs/names", "v1")
	res, err := Push(ctx, src, ref, plain(reg), testRange)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if _, err := Pull(ctx, ref, dst, plain(reg)); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, dst)

	// An older orkpipe's interrupted pull: model.bin assembled beside the journal, its first
	// range journaled.
	old := filepath.Join(t.TempDir(), "old")
	state, err := openPartial(old, res.Artifact.Digest.Hex)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := res.Artifact.File("model.bin")
	copyFile(t, filepath.Join(src, "model.bin"), filepath.Join(state.dir, "model.bin"))
	if err := state.record(f, 0); err != nil {
		t.Fatal(err)
	}
	state.close()
	if err := os.Remove(filepath.Join(state.dir, dataDirName)); err != nil { // the older layout had none
		t.Fatal(err)
	}
	pr, err := Pull(ctx, ref, old, plain(reg))
	if err != nil {
		t.Fatal(err)
	}
	for _, pf := range pr.Files {
		if pf.Name == "model.bin" && pf.Resumed != 1 {
			t.Errorf("model.bin: %d ranges resumed from the older layout's partial file, want 1", pf.Resumed)
		}
	}
	sameFiles(t, src, old)
	if _, err := os.Stat(filepath.Join(old, PartialDir)); !os.IsNotExist(err) {
		t.Errorf("state left behind: %v", err)
	}
}
