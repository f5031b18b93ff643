package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"orkpipe/internal/testfiles"
)

// checkOnReadOnlyMount runs checkReadOnlyCache on rc's cache bind-mounted read-only over itself, in
// a child process with a mount namespace of its own (TestHelperReadOnlyCache): root writes through
// any permission, a read-only mount stops it too.
func checkOnReadOnlyMount(t *testing.T, rc roCache) {
	t.Helper()
	b, err := json.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	fixture := filepath.Join(t.TempDir(), "fixture.json")
	if err := os.WriteFile(fixture, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := testfiles.SelfCommand("-test.run=^TestHelperReadOnlyCache$", "-test.v")
	cmd.Env = append(os.Environ(), roCacheEnv+"="+fixture)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	switch {
	case errors.Is(err, syscall.EPERM): // unshare refused: cmd never started
		testfiles.SkipOptional(t, "a mount namespace of its own for the child (unshare(CLONE_NEWNS)): %v; run as root", err)
	case strings.Contains(string(out), roCacheMountFailed):
		testfiles.SkipOptional(t, "a read-only bind mount in the child's mount namespace: %s; run as root (CAP_SYS_ADMIN)", out)
	case err != nil || !strings.Contains(string(out), "--- PASS: TestHelperReadOnlyCache"):
		t.Fatalf("commands on the read-only cache: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// roCacheEnv names the fixture TestHelperReadOnlyCache checks; roCacheMountFailed starts what it
// prints when it cannot mount.
const (
	roCacheEnv         = "ORKPIPE_RO_CACHE_FIXTURE"
	roCacheMountFailed = "read-only bind mount failed: "
)

// TestHelperReadOnlyCache is not a test: TestReadOnlyCache runs the test binary with it selected, in
// a mount namespace of its own, to bind-mount the cache read-only over itself and run the commands.
func TestHelperReadOnlyCache(t *testing.T) {
	path := os.Getenv(roCacheEnv)
	if path == "" {
		testfiles.SkipHelper(t, "TestReadOnlyCache")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rc roCache
	if err := json.Unmarshal(b, &rc); err != nil {
		t.Fatal(err)
	}
	if err := testfiles.BindReadOnly(rc.Cache); err != nil {
		fmt.Println(roCacheMountFailed + err.Error())
		return
	}
	checkReadOnlyCache(t, rc)
}
