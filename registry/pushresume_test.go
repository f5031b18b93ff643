package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/oci"
	"orkpipe/registry/regtest"
)

// resumeChunk is the chunk size of the push-resume tests: the real GGUF file below is 13 chunks.
const resumeChunk = 256 << 10

// TestHelperPushProcess is not a test: TestPushResumeAfterKill runs the test binary with this test
// selected to push in a separate process that it can SIGKILL.
func TestHelperPushProcess(t *testing.T) {
	if os.Getenv("ORKPIPE_PUSH_HELPER") != "1" {
		testfiles.SkipHelper(t, "TestPushResumeAfterKill")
	}
	_, err := Push(context.Background(), os.Getenv("ORKPIPE_PUSH_SRC"), os.Getenv("ORKPIPE_PUSH_REF"),
		WithPlainHTTP(os.Getenv("ORKPIPE_PUSH_HOST")), WithUploadMode(oci.UploadChunked, resumeChunk),
		WithUploadState(os.Getenv("ORKPIPE_PUSH_STATE")), WithCompression(CompressNever), WithJobs(1))
	t.Fatalf("the push was to be killed, it returned: %v", err)
}

// stallPatch sits in front of the registry, counts the body bytes of every chunk PATCH, and, when
// armed, lets the registry receive the first half of the (after+1)th full-size chunk, then holds
// that request until release is closed (the client is killed meanwhile) and cuts its body.
type stallPatch struct {
	next    http.Handler
	after   int32
	armed   atomic.Bool
	patches atomic.Int32
	bytes   atomic.Int64
	stalled chan struct{} // closed when the held chunk's first half went through
	release chan struct{} // closed by the test once the client is dead
	done    sync.WaitGroup
}

func (s *stallPatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPatch || !strings.Contains(r.URL.Path, "/blobs/uploads/") {
		s.next.ServeHTTP(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.ContentLength == resumeChunk && s.armed.Load() && s.patches.Add(1) == s.after+1 {
		s.done.Add(1)
		defer s.done.Done()
		body = io.MultiReader(io.LimitReader(r.Body, resumeChunk/2), readFunc(func([]byte) (int, error) {
			close(s.stalled)
			<-s.release
			return 0, io.ErrUnexpectedEOF
		}))
	}
	r.Body = io.NopCloser(&countReader{r: body, n: &s.bytes})
	s.next.ServeHTTP(w, r)
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// sessionFiles returns the upload sessions remembered in dir.
func sessionFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPushResumeAfterKill: a push killed (SIGKILL) in the middle of a chunked upload, after the
// registry acknowledged 4 chunks and while it was receiving the 5th, resumes in the next process
// from what the registry holds: it sends at most the blob's bytes minus the acknowledged ones
// (without the upload state it sent them all again), less the half of the cut chunk the registry
// kept, which the saved Location's _state token does not count (TestUploadStaleLocation: such a
// Location is only asked, never PATCHed), and the artifact pulls back identical.
// The session file holds no credentials and is removed once the blob is complete.
func TestPushResumeAfterKill(t *testing.T) {
	ctx := ctxT(t)
	sp := &stallPatch{after: 4, stalled: make(chan struct{}), release: make(chan struct{})}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { sp.next = h; return sp })
	src, state := t.TempDir(), filepath.Join(t.TempDir(), "uploads")
	gguf := filepath.Join(src, "tiny-lfm2moe.gguf")
	copyFile(t, testfiles.Path(t, "tiny-lfm2moe.gguf"), gguf)
	want, err := os.ReadFile(gguf)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len(want))
	if total < 8*resumeChunk {
		t.Fatalf("%s: %d bytes, want at least 8 chunks", gguf, total)
	}
	ref := reg.Ref("packs/pushresume", "v1")

	sp.armed.Store(true)
	cmd := testfiles.SelfCommand("-test.run=^TestHelperPushProcess$")
	cmd.Env = append(os.Environ(), "ORKPIPE_PUSH_HELPER=1", "ORKPIPE_PUSH_SRC="+src, "ORKPIPE_PUSH_REF="+ref,
		"ORKPIPE_PUSH_HOST="+reg.Host, "ORKPIPE_PUSH_STATE="+state)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	<-sp.stalled
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	cmd.Wait()
	close(sp.release)
	sp.done.Wait() // the cut chunk's request is over: the registry holds what it got of it
	sp.armed.Store(false)
	acked := int64(sp.after) * resumeChunk
	t.Logf("push killed after %d acknowledged chunks (%d bytes) and half of the next; %d chunk bytes went through", sp.after, acked, sp.bytes.Load())

	files := sessionFiles(t, state)
	if len(files) != 1 {
		t.Fatalf("upload state %s: %d sessions after the kill, want 1 (the layer's)\n%s", state, len(files), out.String())
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var saved struct {
		Location string
		Offset   int64
		Size     int64
	}
	if err := json.Unmarshal(raw, &saved); err != nil || saved.Offset != acked || saved.Size != total || !strings.Contains(saved.Location, "_state=") {
		t.Fatalf("session file %s: %s (%v), want offset %d of %d and the registry's Location", files[0], raw, err, acked, total)
	}

	// The next push, another process than the killed one, with a fresh Repo.
	var logs bytes.Buffer
	before := sp.bytes.Load()
	res, err := Push(ctx, src, ref, plain(reg), WithUploadMode(oci.UploadChunked, resumeChunk), WithUploadState(state),
		WithCompression(CompressNever), WithJobs(1), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatalf("push after the kill: %v\n%s", err, logs.String())
	}
	sent := sp.bytes.Load() - before
	t.Logf("resumed push sent %d of %d bytes; logs:\n%s", sent, total, logs.String())
	if sent > total-acked || sent <= 0 {
		t.Errorf("the push after the kill sent %d bytes of a %d-byte blob whose first %d bytes the registry had acknowledged: want at most %d (it started over)",
			sent, total, acked, total-acked)
	}
	if sent == total-acked {
		// distribution keeps what it received of a cut PATCH (TestUploadStaleLocation), so the
		// saved Location's _state is stale: resuming must have gone through the GET's Location.
		t.Errorf("the push after the kill sent exactly the unacknowledged bytes: the registry kept none of the cut chunk, so the stale Location was not exercised")
	}
	if !strings.Contains(logs.String(), "resuming an interrupted upload from its remembered session") {
		t.Errorf("the resumption was not logged:\n%s", logs.String())
	}
	if got := sessionFiles(t, state); len(got) != 0 {
		t.Errorf("sessions left after the blob was complete: %v", got)
	}
	if res.Uploaded != total {
		t.Errorf("uploaded %d, want %d", res.Uploaded, total)
	}

	dst := filepath.Join(t.TempDir(), "out")
	if _, err := Pull(ctx, ref, dst, plain(reg)); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dst, "tiny-lfm2moe.gguf"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("pulled file differs from the pushed one (%v)", err)
	}
}

// TestPushStaleUploadState: a remembered session the registry no longer has (an upload UUID it
// never issued: 404), one whose Location does not answer, and a garbage state file each give a fresh upload that succeeds, sends the
// blob once, says so at info level, and leaves no session behind.
func TestPushStaleUploadState(t *testing.T) {
	ctx := ctxT(t)
	sp := &stallPatch{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { sp.next = h; return sp })
	src, state := t.TempDir(), filepath.Join(t.TempDir(), "uploads")
	gguf := filepath.Join(src, "tiny-lfm2moe.gguf")
	copyFile(t, testfiles.Path(t, "tiny-lfm2moe.gguf"), gguf)
	st, err := os.Stat(gguf)
	if err != nil {
		t.Fatal(err)
	}
	total := st.Size()
	opts := func(logs io.Writer) []Option {
		return []Option{plain(reg), WithUploadMode(oci.UploadChunked, resumeChunk), WithUploadState(state),
			WithCompression(CompressNever), WithJobs(1), WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}
	}
	for _, c := range []struct {
		name   string
		tamper func(ss map[string]any) []byte
		want   string
	}{
		{"gone", func(ss map[string]any) []byte {
			// An upload UUID the registry never issued, in the registry's own Location.
			loc := ss["location"].(string)
			i := strings.Index(loc, "/blobs/uploads/") + len("/blobs/uploads/")
			j := strings.IndexByte(loc, '?')
			ss["location"] = loc[:i] + "00000000-0000-4000-8000-000000000000" + loc[j:]
			b, _ := json.Marshal(ss)
			return b
		}, "the registry no longer has the upload session"},
		{"unreachable", func(ss map[string]any) []byte {
			// A Location on a host that refuses connections (port 1): a session never makes a push fail.
			u, _ := url.Parse(ss["location"].(string))
			u.Host = "127.0.0.1:1"
			ss["location"] = u.String()
			b, _ := json.Marshal(ss)
			return b
		}, "(or did not answer about it)"},
		{"garbage", func(map[string]any) []byte { return []byte("{\x00not json") }, "an unusable upload session was removed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref := reg.Ref("packs/stale-"+c.name, "v1")
			// A push canceled in its first chunk leaves the session it saved before that chunk.
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			sp.patches.Store(0)
			sp.after, sp.stalled, sp.release = 0, make(chan struct{}), make(chan struct{})
			sp.armed.Store(true)
			go func() { <-sp.stalled; cancel(); close(sp.release) }()
			if _, err := Push(cctx, src, ref, opts(io.Discard)...); err == nil {
				t.Fatal("the canceled push succeeded")
			}
			sp.done.Wait()
			sp.armed.Store(false)
			files := sessionFiles(t, state)
			if len(files) != 1 {
				t.Fatalf("%d sessions after the canceled push, want 1", len(files))
			}
			raw, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			var ss map[string]any
			if err := json.Unmarshal(raw, &ss); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(files[0], c.tamper(ss), 0o600); err != nil {
				t.Fatal(err)
			}

			var logs bytes.Buffer
			before := sp.bytes.Load()
			if _, err := Push(ctx, src, ref, opts(&logs)...); err != nil {
				t.Fatalf("push over a %s session: %v\n%s", c.name, err, logs.String())
			}
			if sent := sp.bytes.Load() - before; sent != total {
				t.Errorf("%s session: the push sent %d bytes, want the blob's %d once", c.name, sent, total)
			}
			if !infoLogged(logs.String(), c.want) {
				t.Errorf("%s session: logs do not say %q at info level:\n%s", c.name, c.want, logs.String())
			}
			if strings.Contains(logs.String(), "resuming") {
				t.Errorf("%s session: resumed:\n%s", c.name, logs.String())
			}
			if got := sessionFiles(t, state); len(got) != 0 {
				t.Errorf("%s session: sessions left: %v", c.name, got)
			}
			dst := filepath.Join(t.TempDir(), "out")
			if _, err := Pull(ctx, ref, dst, plain(reg)); err != nil {
				t.Fatal(err)
			}
			assertSameFile(t, gguf, filepath.Join(dst, "tiny-lfm2moe.gguf"))
		})
	}
}

func assertSameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil || !bytes.Equal(x, y) {
		t.Fatalf("%s differs from %s (%v)", b, a, err)
	}
}

// infoLogged reports whether a text-handler log line at info level contains s.
func infoLogged(logs, s string) bool {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "level=INFO") && strings.Contains(l, s) {
			return true
		}
	}
	return false
}
