package registry

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"orkpipe/registry/regtest"
)

// TestPushFileChangedBeforeUpload rewrites one byte of a file (same size, in place) after pass 1
// hashed it and before its parts upload: the upload's CRC-32C check must abort the push with
// ErrDigestMismatch naming the file, and no manifest may appear at the reference.
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

// TestCRCReader checks the upload-side check alone: the right bytes pass, a flipped byte, a short
// read and an extra byte fail with ErrDigestMismatch.
func TestCRCReader(t *testing.T) {
	data := bytes.Repeat([]byte("orkpipe part bytes "), 5000)
	want := crc32.Checksum(data, castagnoli)
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 1
	for _, tc := range []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"same", data, true},
		{"flipped", flipped, false},
		{"short", data[:len(data)-1], false},
		{"long", append(bytes.Clone(data), 'x'), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &crcReader{r: bytes.NewReader(tc.in), want: want, size: int64(len(data)), what: "test"}
			got, err := io.ReadAll(r)
			if tc.ok {
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("err %v, %d bytes", err, len(got))
				}
				return
			}
			if !errors.Is(err, ErrDigestMismatch) {
				t.Fatalf("err %v, want ErrDigestMismatch", err)
			}
		})
	}
}
