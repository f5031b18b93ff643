package oci

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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

// offsetShift passes requests to next (a FaultProxy before the registry), except that before the
// client's second PATCH (and the shifts-1 after it) it sends the registry, directly (reg, not counted by the proxy), the first
// half of that chunk through the same Location: the registry then holds half a chunk more than the
// client has sent, and refuses the client's PATCH (416).
type offsetShift struct {
	next, reg http.Handler
	blob      []byte
	half      int64
	shifts    int // PATCHes, from the second, before which half a chunk is sent (0: 1)

	mu       sync.Mutex
	patches  int
	posts    int
	bodyPuts int      // PUTs with a body: monolithic uploads
	statuses []string // "METHOD status" of the client's requests
	inject   int      // status of the PATCH sent behind the client's back
}

func (o *offsetShift) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.Contains(r.URL.Path, "/blobs/uploads/") {
		o.next.ServeHTTP(w, r)
		return
	}
	o.mu.Lock()
	switch {
	case r.Method == http.MethodPost:
		o.posts++
	case r.Method == http.MethodPut && r.ContentLength > 0:
		o.bodyPuts++
	case r.Method == http.MethodPatch:
		o.patches++
		if o.patches >= 2 && o.patches < 2+max(o.shifts, 1) {
			lo, _, _ := strings.Cut(r.Header.Get("Content-Range"), "-")
			off, _ := strconv.ParseInt(lo, 10, 64)
			req := httptest.NewRequest(http.MethodPatch, r.URL.RequestURI(), bytes.NewReader(o.blob[off:off+o.half]))
			req.Host = r.Host
			req.Header.Set("Content-Type", "application/octet-stream")
			req.Header.Set("Content-Range", fmt.Sprintf("%d-%d", off, off+o.half-1))
			rec := httptest.NewRecorder()
			o.reg.ServeHTTP(rec, req)
			o.inject = rec.Code
		}
	}
	o.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	o.next.ServeHTTP(sw, r)
	o.mu.Lock()
	o.statuses = append(o.statuses, r.Method+" "+strconv.Itoa(sw.status))
	o.mu.Unlock()
}

// TestUploadOffsetMismatch: a chunk the registry refuses with 416 in the middle of a chunked upload
// (here: half a chunk more reached the registry through the session's Location than the client
// sent, so the registry's offset is not the chunk's) is resumed as a cut chunk is: the client asks
// the registry how much it holds and continues, chunked, from there, in the same session, and
// commits the blob; nothing is sent whole. It was taken for a refusal of the chunked method (as a
// 413 or 405 is) and the blob was sent again in one monolithic PUT, for a multi-GiB blob the wrong
// answer.
func TestUploadOffsetMismatch(t *testing.T) {
	ctx := testCtx(t)
	const chunk = 256 << 10
	b, d := randomBlob(4*chunk, 11)
	// shifts: the registry's offset moves before that many PATCHes in a row (from the second): each
	// 416 then reflects progress, and none is taken for a refusal of the chunked method.
	for _, shifts := range []int{1, 2} {
		t.Run(strconv.Itoa(shifts), func(t *testing.T) {
			proxy := &regtest.FaultProxy{}
			shift := &offsetShift{next: proxy, blob: b, half: chunk / 2, shifts: shifts}
			reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next, shift.reg = h, h; return shift })
			var logs lockedBuffer
			r, err := Open(ctx, reg.Ref("blobs/offset", "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, chunk),
				WithRetries(3), WithLogger(testLogger(&logs)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Upload(ctx, blobOf(b, d)); err != nil {
				t.Fatalf("upload after the registry's offset moved: %v\n%s", err, logs.String())
			}
			shift.mu.Lock()
			inject, posts, bodyPuts, statuses := shift.inject, shift.posts, shift.bodyPuts, shift.statuses
			shift.mu.Unlock()
			if inject != http.StatusAccepted {
				t.Fatalf("the half chunk sent behind the client's back: HTTP %d, want 202", inject)
			}
			if n := count(statuses, "PATCH 416"); n != shifts {
				t.Fatalf("the registry refused %d PATCHes with 416, want %d: %v", n, shifts, statuses)
			}
			if posts != 1 || bodyPuts != 0 {
				t.Errorf("%d upload sessions started, %d monolithic PUTs; want 1 and 0 (the upload continues chunked in its session): %v\n%s",
					posts, bodyPuts, statuses, logs.String())
			}
			// The client sends every byte once, but for the refused chunks (which the registry may
			// read) and the half chunks the registry already held (skipped).
			if got, most := proxy.UploadBytes.Load(), int64(len(b))+int64(shifts)*(chunk-chunk/2); got > most {
				t.Errorf("the registry received %d bytes from the client for a %d-byte blob, want at most %d (no whole-blob re-send)", got, len(b), most)
			}
			if !strings.Contains(logs.String(), "resuming blob upload") {
				t.Errorf("no resume logged:\n%s", logs.String())
			}
			if data, err := readAll(t, r, d, int64(len(b)), 0, int64(len(b))); err != nil || !bytes.Equal(data, b) {
				t.Fatalf("committed blob differs (%v)", err)
			}
		})
	}
}

// count returns how many of ss are s.
func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}
