// Package regtest starts a real OCI registry (github.com/distribution/distribution/v3 v3.1.2, the
// reference implementation behind Docker Hub's registry) as a child process, for tests and the
// bench harness.
//
// It is not a fake: blobs and manifests go through distribution's HTTP handlers and its filesystem
// storage driver, rooted in a temporary directory so that multi-GiB blobs do not live in memory.
// The registry is the command in internal/testregistry, a Go module of its own (distribution's
// dependency graph conflicts with dagger.io/dagger's, see its package doc). Binary returns it:
// the file named by $ORKPIPE_TEST_REGISTRY when set (.ci/run builds it once up front), else a
// build of internal/testregistry kept in the user cache directory under a digest of its sources,
// so that it is built once per source change, not once per test process.
package regtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvBinary names a prebuilt internal/testregistry binary to use instead of building one.
const EnvBinary = "ORKPIPE_TEST_REGISTRY"

// Registry is a running registry.
type Registry struct {
	// Host is "127.0.0.1:PORT", the registry part of a reference (a fault-injecting front
	// when Start was given a wrap).
	Host string
	// RootDir is where the storage driver keeps blobs and manifests.
	RootDir string
	proc    *Process
}

// Start starts a registry whose handler is wrapped by wrap (nil: none), for example a
// fault-injecting proxy: then the registry process sits behind an in-process reverse proxy
// (which keeps the client's Host header, so the registry's upload locations point at the front)
// and wrap sees every request. It is shut down when the test ends.
func Start(t testing.TB, wrap func(http.Handler) http.Handler) *Registry {
	t.Helper()
	root := t.TempDir()
	p, err := StartProcess(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("regtest: %v", err)
		}
	})
	r := &Registry{Host: p.Host, RootDir: root, proc: p}
	if wrap == nil {
		return r
	}
	target := &url.URL{Scheme: "http", Host: p.Host}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
	}}
	front := httptest.NewServer(wrap(proxy))
	t.Cleanup(front.Close)
	r.Host = strings.TrimPrefix(front.URL, "http://")
	return r
}

// Ref returns "HOST/repo:tag" (or "HOST/repo@digest" when tagOrDigest contains ':').
func (r *Registry) Ref(repo, tagOrDigest string) string {
	if strings.Contains(tagOrDigest, ":") {
		return r.Host + "/" + repo + "@" + tagOrDigest
	}
	return r.Host + "/" + repo + ":" + tagOrDigest
}

// Process is a registry child process serving root on 127.0.0.1.
type Process struct {
	// Host is "127.0.0.1:PORT".
	Host   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedWriter
}

// StartProcess starts the registry (Binary) serving root, a directory, on a free port of
// 127.0.0.1 and returns once it accepts connections. The process ends when Close is called, or
// when this process exits (its stdin closes).
func StartProcess(ctx context.Context, root string) (*Process, error) {
	bin, err := Binary(ctx)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-root", root, "-addr", "127.0.0.1:0")
	p := &Process{cmd: cmd, stderr: &lockedWriter{}}
	cmd.Stderr = p.stderr
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("regtest: starting %s: %w", bin, err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	host, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		p.stdin.Close()
		werr := cmd.Wait()
		return nil, fmt.Errorf("regtest: %s did not start (%v, %v): %s", bin, err, werr, p.stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	p.Host = host
	return p, nil
}

// Close stops the registry (stdin EOF, then SIGKILL after 10 s) and reports an unclean exit with
// the registry's stderr.
func (p *Process) Close() error {
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("registry %s exited: %v: %s", p.Host, err, p.stderr.String())
		}
		return nil
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-done
		return fmt.Errorf("registry %s did not stop within 10s; killed", p.Host)
	}
}

// lockedWriter collects the registry's stderr (written by exec's copying goroutine).
type lockedWriter struct {
	mu sync.Mutex
	w  bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(l.w.String())
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary returns the registry executable: $ORKPIPE_TEST_REGISTRY if set, else a build of
// internal/testregistry cached under the user cache directory by a digest of its sources and
// the Go version (built on first use; concurrent builders each write a temp file and rename).
func Binary(ctx context.Context) (string, error) {
	binOnce.Do(func() { binPath, binErr = binary(ctx) })
	return binPath, binErr
}

func binary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			return "", fmt.Errorf("regtest: %s=%s: not a file (%v); build it with `go build -C internal/testregistry -o FILE .`", EnvBinary, p, err)
		}
		return p, nil
	}
	src, err := sourceDir(ctx)
	if err != nil {
		return "", err
	}
	sum, err := sourceDigest(src)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("regtest: no cache directory for the registry binary (set %s): %w", EnvBinary, err)
	}
	// Beside orkpipe's default store (the user cache dir + /orkpipe), never inside it: OpenStore
	// refuses a directory holding anything but its own layout.
	out := filepath.Join(cache, "orkpipe-testregistry", sum, "testregistry")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", fmt.Errorf("regtest: %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp-%d", out, os.Getpid())
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, ".")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("regtest: building the test registry in %s: %w\n%s", src, err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", fmt.Errorf("regtest: %w", err)
	}
	return out, nil
}

// sourceDir is internal/testregistry of the orkpipe module the test runs in.
func sourceDir(ctx context.Context) (string, error) {
	b, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("regtest: go env GOMOD: %w (set %s to a built test registry)", err, EnvBinary)
	}
	gomod := strings.TrimSpace(string(b))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("regtest: not inside the orkpipe module (set %s to a built test registry)", EnvBinary)
	}
	dir := filepath.Join(filepath.Dir(gomod), "internal", "testregistry")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("regtest: the test registry's module: %w", err)
	}
	return dir, nil
}

// sourceDigest is the sha256 of the Go version and of every file of dir (go.mod, go.sum, *.go).
func sourceDigest(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("regtest: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", runtime.Version())
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return "", fmt.Errorf("regtest: %w", err)
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}
