package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/registry/regtest"
)

// TestUploadPresentBlobKeepsHeldSession: an upload that finds its blob already in the repository
// forgets the blob's remembered session only under the session's lock: while another upload (here
// gated after its first acknowledged chunk, the blob meanwhile committed by a third upload without
// upload state) holds it, the session file is left to that upload, which goes on, commits, and
// forgets it itself. It was removed from under its holder.
func TestUploadPresentBlobKeepsHeldSession(t *testing.T) {
	ctx := testCtx(t)
	const chunk = MinChunkSize
	b, d := randomBlob(4*chunk, 16)
	reg := regtest.Start(t, nil)
	state := filepath.Join(t.TempDir(), "uploads")
	open := func(logs *lockedBuffer, opts ...Option) *Repo {
		opts = append([]Option{WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, chunk), WithRetries(3), WithLogger(testLogger(logs))}, opts...)
		r, err := Open(ctx, reg.Ref("blobs/present", "x"), true, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var logsA, logsB, logsC lockedBuffer
	ra, rb, rc := open(&logsA, WithUploadState(state)), open(&logsB, WithUploadState(state)), open(&logsC)
	src := &gatedSource{b: b, gate: chunk, reached: make(chan struct{}), release: make(chan struct{})}
	doneA := make(chan error, 1)
	go func() {
		_, err := ra.Upload(ctx, Blob{Digest: d, Size: int64(len(b)), Open: src.open(ctx)})
		doneA <- err
	}()
	select {
	case <-src.reached:
	case err := <-doneA:
		t.Fatalf("the first upload ended before its second chunk: %v\n%s", err, logsA.String())
	}
	sessions := func() []string {
		m, err := filepath.Glob(filepath.Join(state, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if got := sessions(); len(got) != 1 {
		close(src.release)
		t.Fatalf("sessions while the first upload holds its lock: %v, want 1", got)
	}
	if _, err := rc.Upload(ctx, blobOf(b, d)); err != nil {
		close(src.release)
		t.Fatalf("upload without state: %v\n%s", err, logsC.String())
	}
	reused, err := rb.Upload(ctx, blobOf(b, d))
	held := sessions()
	close(src.release)
	if err != nil || !reused {
		t.Errorf("upload of the present blob: reused %v, %v\n%s", reused, err, logsB.String())
	}
	if len(held) != 1 {
		t.Errorf("sessions after an upload found the blob present while another held its session: %v, want the holder's kept", held)
	}
	if err := <-doneA; err != nil {
		t.Errorf("the first upload, released: %v\n%s", err, logsA.String())
	}
	if m, _ := filepath.Glob(filepath.Join(state, "*")); len(m) != 0 {
		t.Errorf("state left after every upload: %v", m)
	}
}

// TestUploadUnlockableStateWarnsOnce: with a state directory whose session locks cannot be taken
// (here a path under a regular file), every upload goes on without a remembered session, and the
// warning is given once for the directory, then at debug level. It warned for every blob.
func TestUploadUnlockableStateWarnsOnce(t *testing.T) {
	ctx := testCtx(t)
	const chunk = MinChunkSize
	reg := regtest.Start(t, nil)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	r, err := Open(ctx, reg.Ref("blobs/unlockable", "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, chunk),
		WithRetries(3), WithUploadState(filepath.Join(file, "uploads")), WithLogger(testLogger(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	for seed := uint64(17); seed < 20; seed++ {
		b, d := randomBlob(2*chunk, seed)
		if _, err := r.Upload(ctx, blobOf(b, d)); err != nil {
			t.Fatalf("upload %d with an unlockable state directory: %v\n%s", seed, err, logs.String())
		}
	}
	if n := strings.Count(logs.String(), "cannot lock the blob's upload session"); n != 1 {
		t.Errorf("the unlockable state directory was warned of %d times for 3 blobs, want once:\n%s", n, logs.String())
	}
}
