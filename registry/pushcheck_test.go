package registry

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"orkpipe/registry/regtest"
)

// TestPushFileChangedBeforeUpload rewrites one byte of a file (same size, in place) after pass 1
// hashed it and before its parts upload: the registry's check of the sha256 of the bytes sent must
// fail the push with ErrDigestMismatch naming the file, and no manifest may appear at the reference.
func TestPushFileChangedBeforeUpload(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	path := filepath.Join(src, "big.orkpack")
	writeRandom(t, path, 3<<20, 7)
	var once sync.Once
	flip := ProgressFunc(func(e Event) {
		if e.Kind != EventStart {
			return
		}
		once.Do(func() {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			var b [1]byte
			if _, err := f.ReadAt(b[:], 2<<20); err != nil {
				t.Error(err)
			}
			b[0] ^= 0x40
			if _, err := f.WriteAt(b[:], 2<<20); err != nil {
				t.Error(err)
			}
		})
	})
	ref := reg.Ref("packs/changed", "v1")
	_, err := Push(ctx, src, ref, plain(reg), WithPartSize(1<<20), WithJobs(2), WithProgress(flip), WithRetries(1))
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("push of a file changed before upload: err %v, want ErrDigestMismatch", err)
	}
	t.Logf("error: %v", err)
	r, perr := name.ParseReference(ref)
	if perr != nil {
		t.Fatal(perr)
	}
	if _, gerr := remote.Get(r, remote.WithContext(ctx)); gerr == nil {
		t.Fatal("a manifest was put although a part failed its check")
	}
}
