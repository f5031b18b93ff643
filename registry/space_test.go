package registry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/artifacts/sparse"
	"orkpipe/registry/regtest"
)

// withFreeSpace makes Pull read the destination's free space from free (a full disk cannot be made
// on demand; TestPullRefusesOnFullTmpfs checks the real reading).
func withFreeSpace(free func(dir string) (int64, error)) Option {
	return func(o *options) error { o.freeSpace = free; return nil }
}

// fixedFree reports free bytes for every directory and records the directories asked about.
func fixedFree(free int64, asked *[]string) Option {
	return withFreeSpace(func(dir string) (int64, error) {
		*asked = append(*asked, dir)
		return free, nil
	})
}

// TestPullRefusesWithoutSpace: pull started whatever the destination's free space and failed
// with ENOSPC part way (after hours, for a big artifact). It must refuse before downloading when
// the data still to write (holes, files in place and journaled ranges excluded) exceeds the free
// space, with ErrNoSpace naming the directory and both numbers, keeping an interrupted pull's
// state; and start when the data fits exactly, or with WithoutSpaceCheck.
func TestPullRefusesWithoutSpace(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	const mib = 1 << 20
	writeRandom(t, filepath.Join(src, "big.bin"), 12*mib, 3) // raw, three ranges
	// 16 MiB with 4 MiB of data: the holes need no space.
	writeText(t, filepath.Join(src, "sparse.txt"), 16*mib, []Extent{{Off: 0, Len: mib}, {Off: 5 * mib, Len: mib}, {Off: 9 * mib, Len: mib}, {Off: 13 * mib, Len: mib}}, 3)
	writeProvenance(t, src)
	ref := reg.Ref("packs/space", "v1")
	res, err := Push(ctx, src, ref, plain(reg), testRange)
	if err != nil {
		t.Fatal(err)
	}
	var need int64
	for _, f := range res.Artifact.Files {
		need += f.DataSize()
	}
	if st, _ := res.Artifact.File("sparse.txt"); st.DataSize() != 4*mib {
		t.Fatalf("sparse.txt has %d data bytes, want %d", st.DataSize(), 4*mib)
	}

	t.Run("refused", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "out")
		var asked []string
		_, err := Pull(ctx, ref, dst, plain(reg), fixedFree(need-1, &asked))
		if !errors.Is(err, ErrNoSpace) {
			t.Fatalf("pull with %d bytes free for %d bytes of data: %v, want ErrNoSpace", need-1, need, err)
		}
		for _, s := range []string{dst, fmt.Sprintf("need %d bytes", need), fmt.Sprintf("%d bytes", need-1)} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("refusal %q does not say %q", err, s)
			}
		}
		if len(asked) != 1 || asked[0] != dst {
			t.Errorf("free space read for %q, want %q", asked, dst)
		}
		noPulledFiles(t, dst)
		if ents, _ := os.ReadDir(filepath.Join(dst, PartialDir, res.Artifact.Digest.Hex, dataDirName)); len(ents) != 0 {
			t.Errorf("refused pull created %d partial files", len(ents))
		}
	})

	t.Run("fits exactly", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "out")
		var asked []string
		if _, err := Pull(ctx, ref, dst, plain(reg), fixedFree(need, &asked)); err != nil {
			t.Fatalf("pull with exactly the %d bytes of data free: %v", need, err)
		}
		sameFiles(t, src, dst)
		// Every file in place: nothing to write, nothing to check.
		asked = nil
		if _, err := Pull(ctx, ref, dst, plain(reg), fixedFree(0, &asked)); err != nil || len(asked) != 0 {
			t.Fatalf("pull of files all in place with 0 bytes free: %v (free space read for %q)", err, asked)
		}
	})

	t.Run("without the check", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "out")
		var asked []string
		if _, err := Pull(ctx, ref, dst, plain(reg), fixedFree(0, &asked), WithoutSpaceCheck()); err != nil || len(asked) != 0 {
			t.Fatalf("pull with WithoutSpaceCheck: %v (free space read for %q)", err, asked)
		}
		sameFiles(t, src, dst)
	})

	t.Run("resumed", func(t *testing.T) {
		// An interrupted pull's state: big.bin's ranges 0 and 1 verified and journaled.
		dst := t.TempDir()
		big, _ := res.Artifact.File("big.bin")
		state, err := openPartial(dst, res.Artifact.Digest.Hex)
		if err != nil {
			t.Fatal(err)
		}
		copyFile(t, filepath.Join(src, "big.bin"), state.dataPath("big.bin"))
		var journaled int64
		for k := range 2 {
			if err := state.record(big, k); err != nil {
				t.Fatal(err)
			}
			journaled += sparse.Len(clip(big.Extents, big.Ranges[k].Off, big.Ranges[k].Len))
		}
		state.close()
		left := need - journaled
		var asked []string
		_, err = Pull(ctx, ref, dst, plain(reg), fixedFree(left-1, &asked))
		if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), fmt.Sprintf("need %d bytes", left)) {
			t.Fatalf("resumed pull with %d bytes free for %d bytes left: %v, want ErrNoSpace saying %d are needed", left-1, left, err, left)
		}
		if n := len(journalParts(t, dst, res.Artifact)); n != 2 {
			t.Fatalf("after the refusal the journal has %d ranges, want the 2 of the interrupted pull", n)
		}
		if a, b := sha256File(t, state.dataPath("big.bin")), sha256File(t, filepath.Join(src, "big.bin")); a != b {
			t.Fatalf("the refusal changed the interrupted pull's partial file")
		}
		pr, err := Pull(ctx, ref, dst, plain(reg), fixedFree(left, &asked))
		if err != nil {
			t.Fatalf("resumed pull with the %d bytes left free: %v", left, err)
		}
		if pr.Files[0].Name != "big.bin" || pr.Files[0].Resumed != 2 {
			t.Errorf("resumed pull: %+v, want big.bin's 2 journaled ranges reused", pr.Files[0])
		}
		sameFiles(t, src, dst)
	})
}
