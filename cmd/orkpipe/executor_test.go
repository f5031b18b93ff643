package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/daggerenv"
	"orkpipe/pipelines/procexec"
)

// clearDaggerEnv removes every way the Dagger SDK environment could name an engine, the CLI it
// downloads into the user cache directory included (XDG_CACHE_HOME points at an empty directory).
// GOCACHE keeps naming the go command's build cache, which would otherwise move with
// XDG_CACHE_HOME: the go builds these tests start (orkpipe-dagger) reuse it instead of compiling the
// standard library and every module again (70-110 s on two cores).
func clearDaggerEnv(t *testing.T) {
	if dir := goBuildCache(); dir != "" {
		t.Setenv("GOCACHE", dir)
	}
	for _, v := range []string{daggerenv.EnvCLIBin, daggerenv.EnvRunnerHost, "DAGGER_SESSION_PORT", "DAGGER_SESSION_TOKEN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
}

// goBuildCache is `go env GOCACHE` as this test process found it on its first call (clearDaggerEnv
// restores XDG_CACHE_HOME when its test ends), or "" without a go command.
var goBuildCache = sync.OnceValue(func() string {
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
})

// TestExecutorDaggerWithoutEngine: --executor dagger with no engine fails at once, before any
// node runs or anything is written, saying how to point orkpipe at an engine — never a silent
// local build.
func TestExecutorDaggerWithoutEngine(t *testing.T) {
	clearDaggerEnv(t)
	cache := t.TempDir()
	for _, args := range [][]string{
		{"demo", "--size", "4KiB"},
		{"build", filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml")},
	} {
		t.Run(args[0], func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			stdout, err := runCLI(t, append([]string{"--cache", cache, "--mem", "1GiB"}, append(args, "--executor", "dagger", "-o", out)...)...)
			if err == nil {
				t.Fatalf("%s --executor dagger without an engine succeeded:\n%s", args[0], stdout)
			}
			var ue usageError
			if !errors.Is(err, daggerenv.ErrNoEngine) || errors.As(err, &ue) {
				t.Errorf("err %v: want ErrNoEngine, exit status 1", err)
			}
			for _, want := range []string{"--executor dagger", daggerenv.EnvRunnerHost, daggerenv.EnvCLIBin, "docs/dagger.md"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the message does not say %q: %v", want, err)
				}
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the output directory was created: %v", err)
			}
			if strings.Contains(stdout, "node_started") || strings.Contains(stdout, "executed") {
				t.Errorf("nodes ran:\n%s", stdout)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(cache, "actions")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cache got action records: %v", err)
	}
}

func TestExecutorFlagUsage(t *testing.T) {
	clearDaggerEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--executor", "kubernetes"}, `want local or dagger, got "kubernetes"`},
		{[]string{"demo", "--orkpipe-binary", "/bin/ls"}, "only used with --executor dagger"},
	} {
		_, err := runCLI(t, append([]string{"--cache", t.TempDir()}, tc.args...)...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}

// fakeDaggerSession points the SDK environment at a test double of a `dagger run` session (no
// engine can run on this machine) that fails every exec the way the engine does, with a
// recognisable stderr. It returns a func counting the execs received.
func fakeDaggerSession(t *testing.T) func() int {
	clearDaggerEnv(t)
	var mu sync.Mutex
	execs := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Query string `json:"query"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		switch {
		case strings.Contains(req.Query, "withExec"):
			mu.Lock()
			execs++
			mu.Unlock()
			json.NewEncoder(w).Encode(map[string]any{"errors": []any{map[string]any{
				"message":    "exit code: 1",
				"extensions": map[string]any{"_type": "EXEC_ERROR", "exitCode": 1, "stderr": "orkpipe: fake engine: exec refused\n"},
			}}})
		case strings.Contains(req.Query, "directory{withFile"):
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"directory": map[string]any{"withFile": map[string]any{"id": "DIR"}}}})
		case strings.Contains(req.Query, "host"):
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"host": map[string]any{"file": map[string]any{"id": "FILE"}}}})
		default:
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"version": daggerenv.EngineVersion}})
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("DAGGER_SESSION_PORT", srv.URL[strings.LastIndex(srv.URL, ":")+1:])
	t.Setenv("DAGGER_SESSION_TOKEN", "token")
	return func() int { mu.Lock(); defer mu.Unlock(); return execs }
}

// executorTestArgs are the arguments each command that takes --executor is run with here.
var executorTestArgs = map[string][]string{
	"demo":  {"--size", "4KiB"},
	"build": {filepath.Join("..", "..", "pipelines", "recipes", "demo.yaml")},
}

var (
	daggerProgOnce sync.Once
	daggerProg     string
	daggerProgErr  error
)

// daggerExecutorProgram builds cmd/orkpipe-dagger once per test process and points
// ORKPIPE_DAGGER_EXECUTOR at it for the test.
func daggerExecutorProgram(t *testing.T) string {
	daggerProgOnce.Do(func() {
		dir, err := os.MkdirTemp("", "orkpipe-dagger-test-")
		if err != nil {
			daggerProgErr = err
			return
		}
		daggerProg = filepath.Join(dir, daggerenv.ExecutorName)
		daggerProgErr = daggerenv.BuildExecutor(context.Background(), filepath.Join("..", ".."), daggerProg)
	})
	if daggerProgErr != nil {
		t.Fatal(daggerProgErr)
	}
	t.Setenv(daggerenv.EnvExecutor, daggerProg)
	return daggerProg
}

// goCommand returns the path of the go command on PATH (the one running these tests, and the one
// daggerenv.BuildExecutor builds with).
func goCommand(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	return p
}

// TestExecutorDaggerRoutesNodes: every command that takes --executor sends its nodes to the engine
// through the orkpipe-dagger process (the build fails with the fake engine's stderr, so no node ran
// locally) — never a silent local build. Every command goes through openEngine, which is the one
// place the executor is attached.
func TestExecutorDaggerRoutesNodes(t *testing.T) {
	execs := fakeDaggerSession(t)
	daggerExecutorProgram(t)
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		testfiles.SkipBuild(t, "needs linux/amd64: the go command is the static linux/amd64 binary to upload")
	}
	goBin := goCommand(t) // a static linux/amd64 binary
	if err := daggerenv.CheckBinary(goBin); err != nil {
		testfiles.Need(t, "no static linux/amd64 binary to upload (the go command, as go.dev's toolchains are): %v", err)
	}
	root := newRootCommand(newGlobalOptions(io.Discard, io.Discard))
	for _, c := range root.Commands() {
		if c.Flags().Lookup("executor") == nil {
			continue
		}
		name := c.Name()
		t.Run(name, func(t *testing.T) {
			args, ok := executorTestArgs[name]
			if !ok {
				t.Fatalf("add the arguments of %q to executorTestArgs", name)
			}
			cache, before := t.TempDir(), execs()
			_, err := runCLI(t, append(append([]string{"--cache", cache, "--mem", "1GiB", name}, args...),
				"--executor", "dagger", "--orkpipe-binary", goBin, "-o", filepath.Join(t.TempDir(), "out"))...)
			if err == nil || !strings.Contains(err.Error(), "fake engine: exec refused") || !strings.Contains(err.Error(), "Dagger container") {
				t.Fatalf("%s on the fake engine: %v, want the container's stderr", name, err)
			}
			if execs() == before {
				t.Error("no node reached the engine")
			}
			if ents, _ := os.ReadDir(filepath.Join(cache, "actions")); len(ents) > 0 {
				t.Errorf("action records were written although every exec failed: %d", len(ents))
			}
		})
	}
}

// TestDaggerExecutorProgram: without orkpipe-dagger beside orkpipe, on PATH or in
// ORKPIPE_DAGGER_EXECUTOR, a build in the orkpipe module builds it; ORKPIPE_DAGGER_EXECUTOR naming
// nothing is an error saying so, and outside the module the error says how to install it.
func TestDaggerExecutorProgram(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "builds cmd/orkpipe-dagger")
	}
	t.Setenv("PATH", filepath.Dir(goCommand(t)))
	t.Setenv(daggerenv.EnvExecutor, "")
	os.Unsetenv(daggerenv.EnvExecutor)
	opts := newGlobalOptions(io.Discard, io.Discard)
	opts.logger = slog.New(slog.DiscardHandler)
	l := &lazyDagger{opts: opts}
	defer l.close()
	p, err := l.program(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 || filepath.Base(p) != daggerenv.ExecutorName {
		t.Errorf("built %s: %v", p, err)
	}
	t.Setenv(daggerenv.EnvExecutor, filepath.Join(t.TempDir(), "nothing"))
	if _, err := (&lazyDagger{opts: opts}).program(context.Background()); !errors.Is(err, daggerenv.ErrNoExecutor) || !strings.Contains(err.Error(), daggerenv.EnvExecutor) {
		t.Errorf("%s naming nothing: %v", daggerenv.EnvExecutor, err)
	}
	os.Unsetenv(daggerenv.EnvExecutor)
	t.Chdir(t.TempDir())
	if _, err := (&lazyDagger{opts: opts}).program(context.Background()); !errors.Is(err, daggerenv.ErrNoExecutor) || !strings.Contains(err.Error(), "go install ./cmd/orkpipe ./cmd/orkpipe-dagger") {
		t.Errorf("outside the module: %v", err)
	}
}

// TestExecutorDaggerEngine runs the demo through a real Dagger engine (ORKPIPE_DAGGER_ENGINE and
// _EXPERIMENTAL_DAGGER_CLI_BIN, docs/dagger.md "Testing against an engine"; skipped without them):
// orkpipe starts orkpipe-dagger, which runs every node in a container; the outputs are the bytes a
// local run makes, and a rebuild runs nothing and starts no executor process.
func TestExecutorDaggerEngine(t *testing.T) {
	bin := daggerEngine(t)
	run := func(name, cache string, extra ...string) string {
		t.Helper()
		out := filepath.Join(t.TempDir(), "out")
		args := append([]string{"--cache", cache, "--mem", "1GiB", "demo", "--size", "64KiB", "-o", out}, extra...)
		if stdout, err := runCLI(t, args...); err != nil {
			t.Fatalf("%s demo: %v\n%s", name, err, stdout)
		}
		return out
	}
	cache := t.TempDir()
	local, dagger := run("local", t.TempDir()), run("dagger", cache, "--executor", "dagger", "--orkpipe-binary", bin)
	t.Setenv(daggerenv.EnvExecutor, filepath.Join(t.TempDir(), "no-such-program"))
	run("dagger, all cached", cache, "--executor", "dagger", "--orkpipe-binary", bin)
	ents, err := os.ReadDir(local)
	if err != nil || len(ents) == 0 {
		t.Fatalf("local outputs: %v", err)
	}
	for _, e := range ents {
		a, _ := os.ReadFile(filepath.Join(local, e.Name()))
		b, err := os.ReadFile(filepath.Join(dagger, e.Name()))
		if err != nil || !bytes.Equal(a, b) && e.Name() != "timeline.html" {
			t.Errorf("%s: the Dagger run's differs from the local run's (%v)", e.Name(), err)
		}
	}
}

// daggerEngine points this test's builds at the Dagger engine named by ORKPIPE_DAGGER_ENGINE (with
// _EXPERIMENTAL_DAGGER_CLI_BIN; docs/dagger.md "Testing against an engine"), or skips the test
// without one, and returns the static orkpipe binary for its containers.
func daggerEngine(t *testing.T) string {
	t.Helper()
	host := os.Getenv("ORKPIPE_DAGGER_ENGINE")
	if host == "" || os.Getenv(daggerenv.EnvCLIBin) == "" {
		testfiles.SkipOptional(t, "ORKPIPE_DAGGER_ENGINE and "+daggerenv.EnvCLIBin+" are not set: this test needs a running Dagger engine "+
			daggerenv.EngineVersion+" (docs/dagger.md, \"Testing against an engine\")")
	}
	t.Setenv(daggerenv.EnvRunnerHost, host)
	daggerExecutorProgram(t)
	bin := filepath.Join(t.TempDir(), "orkpipe-linux-amd64")
	if err := daggerenv.BuildBinary(context.Background(), filepath.Join("..", ".."), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestSameTree: an orkpipe-dagger built from another known revision than orkpipe is refused; an
// unknown revision on either side (a build outside a checkout) is not.
func TestSameTree(t *testing.T) {
	for _, tc := range []struct {
		self, child string
		refused     bool
	}{{"abc", "abc", false}, {"abc", "", false}, {"", "def", false}, {"abc", "def", true}} {
		err := sameTree("/bin/orkpipe-dagger", tc.self, tc.child)
		if (err != nil) != tc.refused || tc.refused && (!errors.Is(err, procexec.ErrChild) || !strings.Contains(err.Error(), "revision def, this orkpipe from abc")) {
			t.Errorf("self %q, child %q: %v", tc.self, tc.child, err)
		}
	}
}
