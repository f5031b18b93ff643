package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"orkpipe/pipelines/daggerexec"
)

// clearDaggerEnv removes every way the Dagger SDK environment could name an engine.
func clearDaggerEnv(t *testing.T) {
	for _, v := range []string{daggerexec.EnvCLIBin, daggerexec.EnvRunnerHost, "DAGGER_SESSION_PORT", "DAGGER_SESSION_TOKEN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
}

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
			if !errors.Is(err, daggerexec.ErrNoEngine) || errors.As(err, &ue) {
				t.Errorf("err %v: want ErrNoEngine, exit status 1", err)
			}
			for _, want := range []string{"--executor dagger", daggerexec.EnvRunnerHost, daggerexec.EnvCLIBin, "docs/dagger.md"} {
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
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"version": daggerexec.EngineVersion}})
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

// TestExecutorDaggerRoutesNodes: every command that takes --executor sends its nodes to the engine
// (the build fails with the fake engine's stderr, so no node ran locally) — never a silent local
// build. Every command goes through openEngine, which is the one place the executor is attached.
func TestExecutorDaggerRoutesNodes(t *testing.T) {
	execs := fakeDaggerSession(t)
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go") // a static linux/amd64 binary
	if err := daggerexec.CheckBinary(goBin); err != nil {
		t.Skipf("no static linux/amd64 binary to upload: %v", err)
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
