package daggerenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// CLIVersion is the version of the dagger.io/dagger module in go.mod (package daggerexec's tests
// check it against the SDK's engineconn.CLIVersion): the Dagger engine and CLI version orkpipe's
// Dagger executor speaks to.
const CLIVersion = "0.18.14"

// EngineVersion is the Dagger engine and CLI version this executor is built and tested against.
const EngineVersion = "v" + CLIVersion

// Environment variables of the Dagger SDK that select the engine.
const (
	EnvCLIBin      = "_EXPERIMENTAL_DAGGER_CLI_BIN"
	EnvRunnerHost  = "_EXPERIMENTAL_DAGGER_RUNNER_HOST"
	EnvSessionPort = "DAGGER_SESSION_PORT"
)

// HowTo is appended to every ErrNoEngine: how to point orkpipe at an engine.
const HowTo = "point orkpipe at one with the Dagger SDK's environment: " + EnvCLIBin + "=/path/to/dagger (the dagger CLI " +
	EngineVersion + ") and, for an engine that is not started locally through Docker, " + EnvRunnerHost +
	"=tcp://HOST:PORT | unix:///run/dagger/engine.sock | kube-pod://POD?namespace=NS | docker-container://NAME; " +
	"or run orkpipe under `dagger run`. Use --executor local to build on this machine. See docs/dagger.md"

// CheckEnvironment reports, without connecting, whether the SDK environment names a way to reach
// an engine: a `dagger run` session, a dagger CLI in _EXPERIMENTAL_DAGGER_CLI_BIN, or a CLI the SDK
// has already downloaded into the user cache. Otherwise it returns an error wrapping ErrNoEngine
// that says how to point orkpipe at an engine.
func CheckEnvironment() error {
	if os.Getenv(EnvSessionPort) != "" {
		return nil
	}
	if bin, ok := os.LookupEnv(EnvCLIBin); ok {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%w: %s=%q: %v; %s", ErrNoEngine, EnvCLIBin, bin, err, HowTo)
		}
		return nil
	}
	if p := downloadedCLI(); p != "" {
		return nil
	}
	hint := ""
	if p, err := exec.LookPath("dagger"); err == nil {
		hint = fmt.Sprintf(" (a dagger CLI is on PATH at %s: set %s=%s)", p, EnvCLIBin, p)
	}
	return fmt.Errorf("%w configured%s: %s", ErrNoEngine, hint, HowTo)
}

// CLIBinary returns the dagger CLI that CheckEnvironment found: _EXPERIMENTAL_DAGGER_CLI_BIN, else
// the one the SDK downloaded earlier.
func CLIBinary() string {
	if bin, ok := os.LookupEnv(EnvCLIBin); ok {
		if p, err := exec.LookPath(bin); err == nil {
			return p
		}
		return bin
	}
	return downloadedCLI()
}

// downloadedCLI returns the CLI the SDK would use from its cache, or "".
func downloadedCLI() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".cache")
	}
	p := filepath.Join(base, "dagger", "dagger-"+CLIVersion)
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return p
	}
	return ""
}
