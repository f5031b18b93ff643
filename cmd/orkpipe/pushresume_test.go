package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

// pushChunkEnv sets pushChunkSize in a CLI child process (TestMain).
const pushChunkEnv = "ORKPIPE_TEST_PUSH_CHUNK"

// cliChunk is TestPushResumeCLI's chunk size: the demo pack's largest files are several chunks.
const cliChunk = 256 << 10

// holdChunk sits in front of the registry: when armed, it lets the registry receive the first half
// of the (after+1)th full-size chunk PATCH, then holds that request until release is closed (the
// pushing process is killed meanwhile) and cuts its body.
type holdChunk struct {
	next    http.Handler
	after   int32
	armed   atomic.Bool
	patches atomic.Int32
	held    chan struct{} // closed when the held chunk's first half went through
	release chan struct{}
	done    sync.WaitGroup
}

func (h *holdChunk) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPatch || r.ContentLength != cliChunk || !h.armed.Load() || h.patches.Add(1) != h.after+1 {
		h.next.ServeHTTP(w, r)
		return
	}
	h.done.Add(1)
	defer h.done.Done()
	r.Body = io.NopCloser(io.MultiReader(io.LimitReader(r.Body, cliChunk/2), readerFunc(func([]byte) (int, error) {
		close(h.held)
		<-h.release
		return 0, io.ErrUnexpectedEOF
	})))
	h.next.ServeHTTP(w, r)
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestPushResumeCLI: `orkpipe push` of a real build output (the demo recipe's), SIGKILLed while the
// registry receives a chunk of a layer, is run again with the same cache: it resumes that layer
// from what the registry holds (it says so at -v) instead of sending it whole, leaves no upload
// state in <cache>/uploads, and the artifact pulls back identical and verifies.
func TestPushResumeCLI(t *testing.T) {
	cache, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	recipe := filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml")
	if o, err := runCLI(t, "--cache", cache, "build", recipe, "-o", out); err != nil {
		t.Fatalf("build: %v\n%s", err, o)
	}
	var chunked int
	ents, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string // what push sends: the top-level files, hidden ones left out
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		names = append(names, e.Name())
		if info, err := e.Info(); err == nil && info.Size() > 3*cliChunk {
			chunked++
		}
	}
	if chunked == 0 {
		t.Fatalf("no file of the demo build in %s is more than 3 chunks of %d bytes", out, cliChunk)
	}

	proxy := &regtest.FaultProxy{}
	hold := &holdChunk{next: proxy, after: 2, held: make(chan struct{}), release: make(chan struct{})}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return hold })
	ref := reg.Ref("packs/resume", "v1")
	child := func(args ...string) *exec.Cmd {
		raw, err := json.Marshal(append([]string{"--cache", cache, "-v", "-j", "1"}, args...))
		if err != nil {
			t.Fatal(err)
		}
		cmd := testfiles.SelfCommand("-test.run=^$")
		cmd.Env = append(os.Environ(), cliChildEnv+"="+string(raw), pushChunkEnv+"="+strconv.Itoa(cliChunk))
		return cmd
	}

	hold.armed.Store(true)
	first := child("push", out, ref, "--plain-http")
	var firstOut bytes.Buffer
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	select {
	case <-hold.held:
	case err := <-exited:
		t.Fatalf("the push ended (%v) before chunk %d of its layers:\n%s", err, hold.after+1, firstOut.String())
	}
	if err := first.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-exited
	close(hold.release)
	hold.done.Wait() // the cut chunk's request is over
	hold.armed.Store(false)
	sessions, _ := filepath.Glob(filepath.Join(cache, "uploads", "*.json"))
	if len(sessions) != 1 {
		t.Fatalf("%d upload sessions in the cache after the kill, want 1:\n%s", len(sessions), firstOut.String())
	}

	before := proxy.UploadBytes.Load()
	second := child("--json", "push", out, ref, "--plain-http")
	var stdout, stderr bytes.Buffer
	second.Stdout, second.Stderr = &stdout, &stderr
	if err := second.Run(); err != nil {
		t.Fatalf("push after the kill: %v\n%s", err, stderr.String())
	}
	sent := proxy.UploadBytes.Load() - before
	var res struct {
		Digest   string
		Uploaded int64
		Reused   int64
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("push --json: %v\n%s", err, stdout.String())
	}
	t.Logf("push after the kill: sent %d bytes for %d bytes of layers it uploaded (%d already present)", sent, res.Uploaded, res.Reused)
	if sent <= 0 || sent >= res.Uploaded {
		t.Errorf("the push after the kill sent %d bytes for layers of %d bytes: want fewer (the killed push's layer resumed)", sent, res.Uploaded)
	}
	if !strings.Contains(stderr.String(), "resuming an interrupted upload from its remembered session") {
		t.Errorf("the resumption was not logged at -v:\n%s", stderr.String())
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "uploads", "*")); len(left) != 0 {
		t.Errorf("upload state left in the cache after the push: %v", left)
	}

	dst := filepath.Join(t.TempDir(), "pulled")
	if _, errOut, code := runRegistryCLI(t, "pull", ref, "-o", dst, "--plain-http"); code != 0 {
		t.Fatalf("pull: exit %d: %s", code, errOut)
	}
	for _, name := range names {
		a, err1 := os.ReadFile(filepath.Join(out, name))
		b, err2 := os.ReadFile(filepath.Join(dst, name))
		if err := errors.Join(err1, err2); err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: pulled copy differs from the build output (%v)", name, err)
		}
	}
	if o, err := runCLI(t, "verify", dst); err != nil {
		t.Fatalf("verify of the pulled build: %v\n%s", err, o)
	}
}
