package registry

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"orkpipe/artifacts"
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
	_, err := Push(ctx, src, ref, plain(reg), testRange, WithJobs(2), WithProgress(flip), WithRetries(1))
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

// countingDigests is a DigestSource that counts its calls and can return a wrong sha256 for one
// file: a test double for a damaged digests record (the store's FileDigests is tested in
// artifacts; here only what push does with what it is given).
type countingDigests struct {
	mu        sync.Mutex
	calls     map[string]int
	wrongFor  string // file name whose sha256 is returned altered
	forgotten []artifacts.Digest
}

func (c *countingDigests) FileDigests(ctx context.Context, path string) (artifacts.ObjectDigests, error) {
	od, err := artifacts.HashDigests(ctx, path)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[filepath.Base(path)]++
	if filepath.Base(path) == c.wrongFor {
		od.SHA256[0] ^= 1
	}
	return od, err
}

func (c *countingDigests) ForgetDigests(d artifacts.Digest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgotten = append(c.forgotten, d)
}

// TestPushDigestSource: push takes each file's digests from the source once (the store remembers
// them; push itself hashes a raw file never) and gives the manifest a push without a store gives.
// A wrong remembered sha256 is never pushed: the registry refuses the bytes (ErrDigestMismatch),
// the source is told to forget the digests, and no manifest appears.
func TestPushDigestSource(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := buildDir(t)
	plainPush, err := Push(ctx, src, reg.Ref("packs/digests", "plain"), plain(reg), testRange)
	if err != nil {
		t.Fatal(err)
	}
	ds := &countingDigests{}
	res, err := Push(ctx, src, reg.Ref("packs/digests", "source"), plain(reg), testRange, WithDigests(ds))
	if err != nil {
		t.Fatal(err)
	}
	if res.Digest != plainPush.Digest {
		t.Errorf("manifest %s with a digest source, %s without", res.Digest, plainPush.Digest)
	}
	for _, f := range res.Artifact.Files {
		if ds.calls[f.Name] != 1 {
			t.Errorf("%s: digests asked %d times, want 1", f.Name, ds.calls[f.Name])
		}
	}

	wrong := &countingDigests{wrongFor: "stories260K.gguf"}
	ref := reg.Ref("other/digests", "wrong")
	_, err = Push(ctx, src, ref, plain(reg), testRange, WithDigests(wrong))
	if !errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), "stories260K.gguf") || !strings.Contains(err.Error(), "dropped") {
		t.Fatalf("push with a wrong remembered sha256: %v, want ErrDigestMismatch naming the file and the dropped digests", err)
	}
	f, _ := res.Artifact.File("stories260K.gguf")
	if len(wrong.forgotten) != 1 || wrong.forgotten[0] != f.Digests.BLAKE3 {
		t.Errorf("forgotten %v, want [%s]", wrong.forgotten, f.Digests.BLAKE3)
	}
	r, _ := name.ParseReference(ref)
	if _, gerr := remote.Get(r, remote.WithContext(ctx)); gerr == nil {
		t.Fatal("a manifest was put although a layer was refused")
	}
}
