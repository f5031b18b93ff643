package oci

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"orkpipe/registry/regtest"
)

// TestUploadStaleLocation pins what the real registry (distribution) does with an upload Location
// whose _state token is from before a chunk it received only part of, which is what a push killed
// in the middle of a PATCH leaves in its upload state: PATCHing it is refused (416: the token's
// offset is not the bytes held), while GET on it answers 204 with the bytes really held and a
// fresh Location, from which the upload continues and commits. A resumed upload therefore always
// asks first and PATCHes only the Location the GET returned.
func TestUploadStaleLocation(t *testing.T) {
	ctx := testCtx(t)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	const chunk = 256 << 10
	b, d := randomBlob(3*chunk, 7)
	r, err := Open(ctx, reg.Ref("blobs/stale", "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, chunk), WithRetries(1))
	if err != nil {
		t.Fatal(err)
	}
	patch := func(loc string, off, n int64) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, loc, bytes.NewReader(b[off:off+n]))
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Content-Range", fmt.Sprintf("%d-%d", off, off+n-1))
		resp, err := r.client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	loc, err := r.startUpload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := patch(loc, 0, chunk)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("first chunk: %v", err)
	}
	saved, err := location(resp) // what the upload state holds after one acknowledged chunk
	if err != nil {
		t.Fatal(err)
	}
	// The registry receives half of the second chunk. The client sees the cut before the registry
	// has stored what it received (its handler is still writing), so the bytes held are asked
	// until they stop changing.
	proxy.Set("cut-upload", 1, 0)
	if _, err := patch(saved, chunk, chunk); err == nil {
		t.Fatal("the cut chunk got a response")
	}
	proxy.Set("", 0, 0)
	var held int64
	for same, deadline := 0, time.Now().Add(10*time.Second); same < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("the bytes held after the cut chunk did not settle above %d within 10 s (last %d)", chunk, held)
		}
		time.Sleep(100 * time.Millisecond)
		got, _, _, err := r.uploadStatus(ctx, saved)
		if err != nil || got < chunk || got > chunk+chunk/2 {
			t.Fatalf("GET after the cut chunk: %d bytes held, %v; want %d to %d", got, err, chunk, chunk+chunk/2)
		}
		if got == held && got > chunk {
			same++
		} else {
			same, held = 1, got
		}
	}

	resp, err = patch(saved, chunk, chunk)
	if err != nil || resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("PATCH on the Location from before the cut chunk: %v %v, want 416", resp.Status, err)
	}
	resp, err = patch(saved, held, chunk)
	if err != nil || resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("PATCH at the bytes held on the Location from before the cut chunk: %v %v, want 416", resp.Status, err)
	}
	got, _, next, err := r.uploadStatus(ctx, saved)
	if err != nil || got != held {
		t.Fatalf("GET on the Location from before the cut chunk: %d bytes held, %v; want %d", got, err, held)
	}
	off, blob := got, blobOf(b, d)
	blob.Sent = func(int64) {}
	if err := r.patchFrom(ctx, &next, &off, blob); err != nil {
		t.Fatalf("continuing from the GET's Location: %v", err)
	}
	resp, err = r.finishUpload(ctx, next, d, http.NoBody, 0)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("commit: %v %v", resp.Status, err)
	}
	resp.Body.Close()
	if data, err := readAll(t, r, d, int64(len(b)), 0, int64(len(b))); err != nil || !bytes.Equal(data, b) {
		t.Fatalf("committed blob differs (%v)", err)
	}
}

// TestUploadStateFile: a session's Location is written without userinfo (credentials never reach
// the state directory), readable by its owner only; a session of another blob, an expired or an
// oversized file is no session and is removed; the directory keeps at most maxSessions sessions,
// the most recent, and drops dead writers' temp files.
func TestUploadStateFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "uploads")
	s := &sessionStore{dir: dir}
	ss := session{Registry: "reg.example:5000", Repository: "packs/a", Digest: "sha256:" + strings.Repeat("a", 64), Size: 100,
		Location: "https://user:s3cret@reg.example:5000/v2/packs/a/blobs/uploads/u1?_state=tok", Offset: 40}
	if err := s.save(ss); err != nil {
		t.Fatal(err)
	}
	p := s.path(ss.Registry, ss.Repository, ss.Digest)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("s3cret")) || bytes.Contains(raw, []byte("user")) {
		t.Errorf("state file holds the Location's userinfo: %s", raw)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("state file mode: %v %v, want 0600", st.Mode(), err)
	}
	got, ok, bad := s.load(ss.Registry, ss.Repository, ss.Digest, 100)
	if !ok || bad != nil || got.Location != "https://reg.example:5000/v2/packs/a/blobs/uploads/u1?_state=tok" || got.Offset != 40 {
		t.Fatalf("load: %+v %v %v", got, ok, bad)
	}
	if _, ok, bad := s.load(ss.Registry, ss.Repository, ss.Digest, 101); ok || bad == nil {
		t.Errorf("a session of a blob of another size was taken (%v)", bad)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("a session of another blob was left in place (%v)", err)
	}
	s.save(ss)
	os.WriteFile(p, bytes.Repeat([]byte(" "), maxSessionFile+1), 0o600)
	if _, ok, bad := s.load(ss.Registry, ss.Repository, ss.Digest, 100); ok || bad == nil {
		t.Errorf("an oversized state file was taken (%v)", bad)
	}
	s.save(ss)
	expired := ss
	expired.Updated = time.Now().Add(-sessionTTL - time.Hour)
	b, _ := json.Marshal(expired)
	os.WriteFile(p, b, 0o600)
	if _, ok, bad := s.load(ss.Registry, ss.Repository, ss.Digest, 100); ok || bad == nil || !strings.Contains(bad.Error(), "expired") {
		t.Errorf("an expired session was taken (%v)", bad)
	}

	old := time.Now().Add(-2 * time.Hour)
	for i := range maxSessions + 10 {
		ss.Digest = "sha256:" + strconv.Itoa(i)
		if err := s.save(ss); err != nil {
			t.Fatal(err)
		}
		at := old.Add(time.Duration(i) * time.Second)
		os.Chtimes(s.path(ss.Registry, ss.Repository, ss.Digest), at, at)
	}
	tmp := filepath.Join(dir, ".tmp-dead")
	os.WriteFile(tmp, []byte("x"), 0o600)
	os.Chtimes(tmp, old, old)
	if err := s.prune(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != maxSessions {
		t.Errorf("%d files after pruning, want %d sessions", len(left), maxSessions)
	}
	for i := range 10 {
		if _, err := os.Stat(s.path(ss.Registry, ss.Repository, "sha256:"+strconv.Itoa(i))); !os.IsNotExist(err) {
			t.Errorf("session %d of the 10 oldest kept (%v)", i, err)
		}
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("a dead writer's temp file was kept (%v)", err)
	}
}
