package daggerexec_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"dagger.io/dagger/engineconn"

	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/daggerenv"
	"orkpipe/pipelines/daggerexec"
	"orkpipe/pipelines/engine/executortest"
)

// noEngineEnv clears every variable through which the SDK environment could name an engine.
func noEngineEnv(t *testing.T) {
	for _, v := range []string{daggerexec.EnvCLIBin, daggerexec.EnvRunnerHost, "DAGGER_SESSION_PORT", "DAGGER_SESSION_TOKEN"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // no CLI downloaded by the SDK earlier
	t.Setenv("PATH", t.TempDir())
}

func TestNoEngineFailsAtOnce(t *testing.T) {
	noEngineEnv(t)
	store := executortest.OpenStore(t)
	// An hour's connect timeout: New must see that no engine can exist without trying to reach
	// one (a wait would show as this test's timeout, not as a flaky duration check).
	x, err := daggerexec.New(context.Background(), store, daggerexec.WithBinary(goBinary(t)), daggerexec.WithConnectTimeout(time.Hour))
	if !errors.Is(err, daggerexec.ErrNoEngine) {
		x.Close()
		t.Fatalf("New without an engine: %v, want ErrNoEngine", err)
	}
	for _, want := range []string{daggerexec.EnvCLIBin, daggerexec.EnvRunnerHost, "kube-pod://", "--executor local", "docs/dagger.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
}

func TestCLIBinMissing(t *testing.T) {
	noEngineEnv(t)
	t.Setenv(daggerexec.EnvCLIBin, filepath.Join(t.TempDir(), "dagger"))
	err := daggerexec.CheckEnvironment()
	if !errors.Is(err, daggerexec.ErrNoEngine) || !strings.Contains(err.Error(), daggerexec.EnvCLIBin) {
		t.Fatalf("CLI bin that does not exist: %v", err)
	}
}

// fakeCLI writes a test double of the dagger CLI (the real one cannot run here) with the given
// shell body and points the SDK environment at it.
func fakeCLI(t *testing.T, body string) {
	t.Helper()
	noEngineEnv(t)
	p := filepath.Join(t.TempDir(), "fake-dagger")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(daggerexec.EnvCLIBin, p)
	t.Setenv("PATH", "/usr/bin:/bin")
}

func TestConnectIsTimeBoxed(t *testing.T) {
	// A CLI that never reports a session (an engine that does not answer) and, like the real one,
	// ends when its stdin closes.
	fakeCLI(t, "cat >/dev/null")
	store := executortest.OpenStore(t)
	_, err := daggerexec.New(context.Background(), store, daggerexec.WithBinary(goBinary(t)),
		daggerexec.WithConnectTimeout(time.Second), daggerexec.WithRunnerHost("tcp://192.0.2.1:1234"))
	if !errors.Is(err, daggerexec.ErrNoEngine) || !strings.Contains(err.Error(), "within 1s") || !strings.Contains(err.Error(), "tcp://192.0.2.1:1234") {
		t.Fatalf("hanging engine: %v, want ErrNoEngine naming the host and the timeout", err)
	}
}

// TestConnectReportsCLIError: a CLI that fails at once (an engine that refuses connections) is
// reported with its whole stderr, every time. (With the SDK's own CLI session the stderr came
// back only when its copying goroutine happened to run before the error was built: under load
// the error was often a bare "failed to read session params: EOF".) The fake CLI also prints its
// command line and the runner host it was given: the session is started as the SDK starts it.
func TestConnectReportsCLIError(t *testing.T) {
	fakeCLI(t, `echo "args: $*; runner: $`+daggerexec.EnvRunnerHost+`" >&2
echo "Error: failed to connect to engine: dial tcp 192.0.2.1:1234: connection refused" >&2; exit 1`)
	store := executortest.OpenStore(t)
	_, err := daggerexec.New(context.Background(), store, daggerexec.WithBinary(goBinary(t)), daggerexec.WithConnectTimeout(20*time.Second),
		daggerexec.WithRunnerHost("tcp://192.0.2.1:1234"))
	if !errors.Is(err, daggerexec.ErrNoEngine) {
		t.Fatalf("CLI that fails: %v, want ErrNoEngine", err)
	}
	for _, want := range []string{"connection refused", "exit status 1",
		"args: session --label dagger.io/sdk.name:go --label dagger.io/sdk.version:" + strings.TrimPrefix(daggerexec.EngineVersion, "v"),
		"runner: tcp://192.0.2.1:1234"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CLI that fails: the error does not say %q: %v", want, err)
		}
	}
}

func TestCheckBinary(t *testing.T) {
	if err := daggerexec.CheckBinary(goBinary(t)); err != nil {
		t.Errorf("the static go toolchain binary: %v", err)
	}
	text := filepath.Join(t.TempDir(), "script")
	os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755)
	for _, p := range []string{text, "/bin/ls"} {
		if err := daggerexec.CheckBinary(p); !errors.Is(err, daggerexec.ErrBadBinary) {
			t.Errorf("%s: %v, want ErrBadBinary", p, err)
		}
	}
	if err := daggerexec.CheckBinary("/bin/ls"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("a dynamic binary: %v, want advice to build with CGO_ENABLED=0", err)
	}
	if _, err := daggerexec.New(context.Background(), executortest.OpenStore(t), daggerexec.WithBinary("/bin/ls")); !errors.Is(err, daggerexec.ErrBadBinary) {
		t.Errorf("New with a dynamic binary: %v", err)
	}
}

// TestVersionMatchesModule: EngineVersion is the dagger.io/dagger version the module requires.
func TestVersionMatchesModule(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "dagger.io/dagger").Output()
	if err != nil {
		t.Fatalf("go list -m dagger.io/dagger: %v", err)
	}
	if v := strings.TrimSpace(string(out)); v != daggerexec.EngineVersion {
		t.Errorf("go.mod requires dagger.io/dagger %s, EngineVersion says %s", v, daggerexec.EngineVersion)
	}
	if engineconn.CLIVersion != daggerenv.CLIVersion {
		t.Errorf("the SDK speaks to CLI %s, daggerenv.CLIVersion says %s", engineconn.CLIVersion, daggerenv.CLIVersion)
	}
}

// goPath is the go command on PATH as the test binary started (go test puts the toolchain's there),
// looked up before any test narrows PATH (noEngineEnv leaves it a temporary directory).
var goPath, goPathErr = exec.LookPath("go")

// goBinary is a static linux/amd64 executable present on every machine with Go: the toolchain's.
func goBinary(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		testfiles.SkipBuild(t, "needs linux/amd64")
	}
	if goPathErr != nil {
		t.Fatalf("no go command on PATH when the tests started: %v", goPathErr)
	}
	return goPath
}
