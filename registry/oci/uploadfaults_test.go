package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"orkpipe/registry/regtest"
)

// uploadFaults sits in front of a FaultProxy (which counts the upload bytes the registry receives)
// and the real registry, and breaks uploads in ways FaultProxy does not:
//
//   - cutPatch: the PATCH with this (1-based) number is cut: the registry receives its first keep
//     bytes (none: it never sees the request), then the client's connection drops without a status;
//   - refusePut: a monolithic PUT (one with a body) is refused with 413, as by a registry that
//     limits request bodies, so that a refused chunked upload has nowhere to fall back to;
//   - refuse416: every PATCH is refused with 416 before the registry sees it, as by a registry
//     that answers so when it does not take chunks;
//   - corruptCommits: that many commits (the final PUT of a chunked upload) find the upload's data
//     in the registry's storage spoiled first (see spoilUpload).
//
// It records the status of every response it passes on. Its fields are set before the registry
// starts (startFaulty).
type uploadFaults struct {
	next           http.Handler
	repo           string
	t              *testing.T
	cutPatch, keep int64
	refusePut      bool
	refuse416      bool
	corruptCommits atomic.Int32

	patches, posts atomic.Int64
	mu             sync.Mutex
	root           string   // the registry's RootDir
	statuses       []string // "METHOD status"
}

func (u *uploadFaults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.Contains(r.URL.Path, "/blobs/uploads/") {
		u.next.ServeHTTP(w, r)
		return
	}
	switch r.Method {
	case http.MethodPost:
		u.posts.Add(1)
	case http.MethodPatch:
		if u.refuse416 {
			u.patches.Add(1)
			http.Error(w, "chunked uploads not taken", http.StatusRequestedRangeNotSatisfiable)
			u.record(r.Method, http.StatusRequestedRangeNotSatisfiable)
			return
		}
		if u.patches.Add(1) == u.cutPatch {
			if u.keep > 0 {
				r.Body = io.NopCloser(io.MultiReader(io.LimitReader(r.Body, u.keep), errReader{io.ErrUnexpectedEOF}))
				u.next.ServeHTTP(discard{http.Header{}}, r)
			}
			panic(http.ErrAbortHandler) // the client sees the connection drop, no status
		}
	case http.MethodPut:
		if u.refusePut && r.ContentLength > 0 {
			http.Error(w, "request entity too large", http.StatusRequestEntityTooLarge)
			u.record(r.Method, http.StatusRequestEntityTooLarge)
			return
		}
		if r.ContentLength <= 0 && u.corruptCommits.Add(-1) >= 0 {
			u.spoilUpload(path.Base(r.URL.Path))
		}
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	u.next.ServeHTTP(sw, r)
	u.record(r.Method, sw.status)
}

// spoilUpload flips the first byte of the upload's data in the registry's storage and removes the
// digest states distribution saved after each chunk (without them, the commit hashes the data
// itself and finds another digest: DIGEST_INVALID, as after bytes a cut chunk's handler appended
// once the upload had resumed).
func (u *uploadFaults) spoilUpload(uuid string) {
	u.mu.Lock()
	root := u.root
	u.mu.Unlock()
	dir := filepath.Join(root, "docker", "registry", "v2", "repositories", u.repo, "_uploads", uuid)
	f, err := os.OpenFile(filepath.Join(dir, "data"), os.O_RDWR, 0)
	if err != nil {
		u.t.Errorf("spoiling upload %s: %v", uuid, err)
		return
	}
	defer f.Close()
	var one [1]byte
	if _, err := f.ReadAt(one[:], 0); err != nil {
		u.t.Errorf("spoiling upload %s: %v", uuid, err)
	}
	one[0] ^= 0xff
	if _, err := f.WriteAt(one[:], 0); err != nil {
		u.t.Errorf("spoiling upload %s: %v", uuid, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "hashstates")); err != nil {
		u.t.Errorf("spoiling upload %s: %v", uuid, err)
	}
}

func (u *uploadFaults) record(method string, status int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.statuses = append(u.statuses, method+" "+http.StatusText(status))
}

// uploadsLeft returns the upload sessions the registry's storage holds for the repository: the
// directories under _uploads with a startedat file (a committed or cancelled upload has none;
// distribution's cancel closes the upload's writer after removing its directory, which stores
// the writer's hash state there again, so a cancelled upload leaves that and nothing else).
func (u *uploadFaults) uploadsLeft() []string {
	u.mu.Lock()
	root := u.root
	u.mu.Unlock()
	dir := filepath.Join(root, "docker", "registry", "v2", "repositories", u.repo, "_uploads")
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		u.t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "startedat")); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// responses returns the statuses recorded.
func (u *uploadFaults) responses() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.statuses...)
}

// served reports whether any response had this status.
func (u *uploadFaults) served(status int) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.statuses {
		if strings.HasSuffix(s, " "+http.StatusText(status)) {
			return true
		}
	}
	return false
}

// startFaulty starts a real registry behind u (for repository u.repo) and a FaultProxy.
func startFaulty(t *testing.T, u *uploadFaults) *regtest.Registry {
	proxy := &regtest.FaultProxy{}
	u.next, u.t = proxy, t
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return u })
	u.mu.Lock()
	u.root = reg.RootDir
	u.mu.Unlock()
	return reg
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type discard struct{ h http.Header }

func (d discard) Header() http.Header         { return d.h }
func (d discard) Write(b []byte) (int, error) { return len(b), nil }
func (d discard) WriteHeader(int)             {}

// testLogger returns a logger writing text lines to buf (safe for concurrent use).
func testLogger(buf *lockedBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// when, if set, is called with every write (a log line) outside the lock.
	when func(line string)
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	n, err := l.b.Write(p)
	when := l.when
	l.mu.Unlock()
	if when != nil {
		when(string(p))
	}
	return n, err
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUploadAmbiguousRange: distribution answers an upload-status GET with Range "0-0" both when it
// holds no byte of the upload and when it holds one. A chunked upload whose first chunk was cut
// before the registry stored any of it (or after one byte) starts a fresh session, within the
// process and from a session an earlier process left, instead of PATCHing from byte 1: that PATCH
// was refused (416), and the fallback to a monolithic upload is refused too by a registry that
// limits request bodies, so the push failed. The blob is committed whole either way, no request
// is refused, the fresh start is logged, and the session given up is cancelled (DELETE): none is
// left in the registry's storage (it was left until the registry purged it).
func TestUploadAmbiguousRange(t *testing.T) {
	ctx := testCtx(t)
	const chunk = MinChunkSize
	b, d := randomBlob(4*chunk, 11)
	for _, keep := range []int64{0, 1} {
		t.Run(fmt.Sprintf("in-process-%d", keep), func(t *testing.T) {
			repo := fmt.Sprintf("blobs/ambiguous-%d", keep)
			u := &uploadFaults{repo: repo, cutPatch: 1, keep: keep, refusePut: true}
			reg := startFaulty(t, u)
			var logs lockedBuffer
			r, err := Open(ctx, reg.Ref(repo, "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, chunk),
				WithRetries(3), WithLogger(testLogger(&logs)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Upload(ctx, blobOf(b, d)); err != nil {
				t.Fatalf("upload whose first chunk was cut with %d bytes received: %v\n%s", keep, err, logs.String())
			}
			if u.served(http.StatusRequestedRangeNotSatisfiable) {
				t.Errorf("a PATCH was refused (416): the upload resumed from a guessed offset; responses %v", u.responses())
			}
			if !strings.Contains(logs.String(), "ambiguous") {
				t.Errorf("the fresh start was not logged:\n%s", logs.String())
			}
			if left := u.uploadsLeft(); len(left) != 0 {
				t.Errorf("upload sessions left on the registry: %v, want the one given up cancelled; responses %v", left, u.responses())
			}
			if got, err := readAll(t, r, d, int64(len(b)), 0, int64(len(b))); err != nil || !bytes.Equal(got, b) {
				t.Fatalf("committed blob differs (%v)", err)
			}
		})
	}

	t.Run("across-processes", func(t *testing.T) {
		repo := "blobs/ambiguous-state"
		u := &uploadFaults{repo: repo, cutPatch: 1, refusePut: true}
		reg := startFaulty(t, u)
		state := filepath.Join(t.TempDir(), "uploads")
		open := func(logs *lockedBuffer, retries int) *Repo {
			r, err := Open(ctx, reg.Ref(repo, "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, chunk),
				WithRetries(retries), WithUploadState(state), WithLogger(testLogger(logs)))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		// The first process's only attempt is cut before the registry stored a byte: it leaves the
		// session it saved when the upload started.
		var first lockedBuffer
		if _, err := open(&first, 1).Upload(ctx, blobOf(b, d)); err == nil || !Transient(err) {
			t.Fatalf("cut upload: %v, want a transient failure", err)
		}
		if m, _ := filepath.Glob(filepath.Join(state, "*.json")); len(m) != 1 {
			t.Fatalf("sessions after the cut upload: %v, want 1\n%s", m, first.String())
		}
		var logs lockedBuffer
		r := open(&logs, 3)
		if _, err := r.Upload(ctx, blobOf(b, d)); err != nil {
			t.Fatalf("upload after the cut one: %v\n%s", err, logs.String())
		}
		if u.served(http.StatusRequestedRangeNotSatisfiable) {
			t.Errorf("a PATCH was refused (416): the remembered session was resumed from a guessed offset; responses %v", u.responses())
		}
		if !strings.Contains(logs.String(), "level=INFO") || !strings.Contains(logs.String(), "is ambiguous (no byte or one); uploading the blob afresh") {
			t.Errorf("the fresh start was not logged at info level:\n%s", logs.String())
		}
		if m, _ := filepath.Glob(filepath.Join(state, "*")); len(m) != 0 {
			t.Errorf("state left after the upload: %v", m)
		}
		if left := u.uploadsLeft(); len(left) != 0 {
			t.Errorf("upload sessions left on the registry: %v, want the remembered one cancelled; responses %v", left, u.responses())
		}
		if got, err := readAll(t, r, d, int64(len(b)), 0, int64(len(b))); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("committed blob differs (%v)", err)
		}
	})
}

// TestUploadRestartsAfterDigestInvalid: a chunked upload that resumed within the process (its second
// chunk cut) and whose commit the registry then refuses as DIGEST_INVALID (here its stored data
// spoiled, as the cut chunk's handler appending after the registry answered how much it held does)
// starts the blob afresh once, logged, and succeeds; it failed the push with ErrDigestMismatch.
// A source that does not hash to the digest is refused again after that one restart and reported
// as ErrDigestMismatch, and without a resume it is not restarted at all.
func TestUploadRestartsAfterDigestInvalid(t *testing.T) {
	ctx := testCtx(t)
	const chunk = MinChunkSize
	b, d := randomBlob(4*chunk, 12)
	other, _ := randomBlob(4*chunk, 13)
	for _, c := range []struct {
		name      string
		src       []byte
		cut       int64 // the PATCH cut (0: none)
		spoil     int32 // commits spoiled
		wantErr   error
		wantPosts int64
	}{
		{"spoiled-after-resume", b, 2, 1, nil, 2},
		{"wrong-source-after-resume", other, 2, 0, ErrDigestMismatch, 2},
		{"wrong-source", other, 0, 0, ErrDigestMismatch, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			repo := "blobs/" + c.name
			u := &uploadFaults{repo: repo, cutPatch: c.cut}
			u.corruptCommits.Store(c.spoil)
			reg := startFaulty(t, u)
			var logs lockedBuffer
			r, err := Open(ctx, reg.Ref(repo, "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, chunk),
				WithRetries(3), WithLogger(testLogger(&logs)))
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.Upload(ctx, Blob{Digest: d, Size: int64(len(b)), Open: blobOf(c.src, d).Open})
			if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Fatalf("upload: %v, want %v\n%s", err, c.wantErr, logs.String())
			}
			if got := u.posts.Load(); got != c.wantPosts {
				t.Errorf("%d upload sessions started, want %d\n%s", got, c.wantPosts, logs.String())
			}
			restarted := strings.Contains(logs.String(), "uploading the blob afresh once")
			if restarted != (c.wantPosts == 2) {
				t.Errorf("restart logged: %v, want %v\n%s", restarted, c.wantPosts == 2, logs.String())
			}
			ok, err := r.BlobExists(ctx, d, int64(len(b)))
			if err != nil || ok != (c.wantErr == nil) {
				t.Fatalf("blob exists: %v (%v), want %v", ok, err, c.wantErr == nil)
			}
			if ok {
				if got, err := readAll(t, r, d, int64(len(b)), 0, int64(len(b))); err != nil || !bytes.Equal(got, b) {
					t.Fatalf("committed blob differs (%v)", err)
				}
			}
		})
	}
}

// gatedSource serves b, blocking once its reader reaches gate until release is closed; reached is
// closed then.
type gatedSource struct {
	b       []byte
	gate    int64
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gatedSource) open(ctx context.Context) func(off int64) (io.ReadCloser, error) {
	return func(off int64) (io.ReadCloser, error) {
		return io.NopCloser(&gatedReader{g: g, ctx: ctx, off: off}), nil
	}
}

type gatedReader struct {
	g   *gatedSource
	ctx context.Context
	off int64
}

func (r *gatedReader) Read(p []byte) (int, error) {
	if r.off >= r.g.gate {
		r.g.once.Do(func() { close(r.g.reached) })
		select {
		case <-r.g.release:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
	if r.off >= int64(len(r.g.b)) {
		return 0, io.EOF
	}
	if r.off < r.g.gate {
		p = p[:min(int64(len(p)), r.g.gate-r.off)]
	}
	n := copy(p, r.g.b[r.off:])
	r.off += int64(n)
	return n, nil
}

// TestUploadConcurrentSameBlob: two uploads of the same blob to the same repository with the same
// upload state (two orkpipe push processes on one cache), the second started while the first holds
// its session after one acknowledged chunk. The second waits for the first (it says so), then
// finds the blob committed and sends nothing: both succeed, the registry received the blob's bytes
// once, the blob is whole, and no session or lock file is left. Without the lock, the second
// resumed the first's session and both PATCHed it.
func TestUploadConcurrentSameBlob(t *testing.T) {
	ctx := testCtx(t)
	const chunk = MinChunkSize
	b, d := randomBlob(8*chunk, 14)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	state := filepath.Join(t.TempDir(), "uploads")
	open := func(logs *lockedBuffer) *Repo {
		r, err := Open(ctx, reg.Ref("blobs/concurrent", "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, chunk),
			WithRetries(3), WithUploadState(state), WithLogger(testLogger(logs)))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var logsA, logsB lockedBuffer
	waiting := make(chan struct{})
	var waitOnce sync.Once
	logsB.when = func(line string) {
		if strings.Contains(line, "holds its upload session; waiting for it") {
			waitOnce.Do(func() { close(waiting) })
		}
	}
	ra, rb := open(&logsA), open(&logsB)
	// The first upload's source stops after its first chunk: the registry has acknowledged it and
	// the session is saved at that offset, and the second chunk's PATCH is open.
	src := &gatedSource{b: b, gate: chunk, reached: make(chan struct{}), release: make(chan struct{})}
	type result struct {
		reused bool
		err    error
	}
	doneA, doneB := make(chan result, 1), make(chan result, 1)
	go func() {
		reused, err := ra.Upload(ctx, Blob{Digest: d, Size: int64(len(b)), Open: src.open(ctx)})
		doneA <- result{reused, err}
	}()
	select {
	case <-src.reached:
	case res := <-doneA:
		t.Fatalf("the first upload ended before its second chunk: %+v\n%s", res, logsA.String())
	}
	go func() {
		reused, err := rb.Upload(ctx, blobOf(b, d))
		doneB <- result{reused, err}
	}()
	var b1 result
	gotB := false
	select {
	case <-waiting:
	case b1 = <-doneB: // it did not wait
		gotB = true
	}
	close(src.release)
	a := <-doneA
	if !gotB {
		b1 = <-doneB
	}
	if a.err != nil || a.reused {
		t.Errorf("first upload: reused %v, %v\n%s", a.reused, a.err, logsA.String())
	}
	if b1.err != nil || !b1.reused {
		t.Errorf("second upload: reused %v, %v; want it to wait and find the blob\n%s", b1.reused, b1.err, logsB.String())
	}
	if got := proxy.UploadBytes.Load(); got != int64(len(b)) {
		t.Errorf("the registry received %d upload bytes for a %d-byte blob, want each byte once", got, len(b))
	}
	if m, _ := filepath.Glob(filepath.Join(state, "*")); len(m) != 0 {
		t.Errorf("state left after both uploads: %v", m)
	}
	if got, err := readAll(t, ra, d, int64(len(b)), 0, int64(len(b))); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("committed blob differs (%v)", err)
	}
}

// TestUploadFallsBackAfter416WithoutProgress: a registry answering 416 to every PATCH (instead of
// the 405 or 501 most send when they take no chunks) is taken, after two such answers in a row
// that leave it holding no more of the upload, for one refusing the chunked method: the upload
// falls back to a monolithic PUT, logged, and commits the blob. It used up the retries (each 416
// resumed as an offset mismatch) and failed. (A 416 after which the registry holds more still
// resumes: TestUploadOffsetMismatch.)
func TestUploadFallsBackAfter416WithoutProgress(t *testing.T) {
	ctx := testCtx(t)
	const chunk = MinChunkSize
	b, d := randomBlob(4*chunk, 15)
	repo := "blobs/refuse-416"
	u := &uploadFaults{repo: repo, refuse416: true}
	reg := startFaulty(t, u)
	var logs lockedBuffer
	r, err := Open(ctx, reg.Ref(repo, "x"), true, WithPlainHTTP(reg.Host), WithUploadMode(UploadChunked, chunk),
		WithRetries(DefaultRetries), WithLogger(testLogger(&logs)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Upload(ctx, blobOf(b, d)); err != nil {
		t.Fatalf("upload to a registry answering 416 to every PATCH: %v\n%s", err, logs.String())
	}
	if got := u.patches.Load(); got != 2 {
		t.Errorf("%d PATCHes sent, want 2 (two 416 answers without progress, then the fallback); responses %v", got, u.responses())
	}
	if !slices.Contains(u.responses(), "PUT "+http.StatusText(http.StatusCreated)) {
		t.Errorf("no monolithic PUT committed the blob; responses %v", u.responses())
	}
	if left := u.uploadsLeft(); len(left) != 0 {
		t.Errorf("upload sessions left on the registry: %v, want the chunked ones given up cancelled; responses %v", left, u.responses())
	}
	for _, want := range []string{"twice in a row without holding more", "falling back"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if got, err := readAll(t, r, d, int64(len(b)), 0, int64(len(b))); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("committed blob differs (%v)", err)
	}
}
