package artifacts

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

// checkOnReadOnlyMount runs checkUnwritable on fx's store bind-mounted read-only over itself, in a
// child process with a mount namespace of its own (TestHelperReadOnlyStore): root writes through
// any permission, a read-only mount stops it too.
func checkOnReadOnlyMount(t *testing.T, fx roFixture) {
	t.Helper()
	b, err := json.Marshal(fx)
	if err != nil {
		t.Fatal(err)
	}
	fixture := filepath.Join(t.TempDir(), "fixture.json")
	if err := os.WriteFile(fixture, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := testfiles.SelfCommand("-test.run=^TestHelperReadOnlyStore$", "-test.v")
	cmd.Env = append(os.Environ(), roFixtureEnv+"="+fixture)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	switch {
	case errors.Is(err, syscall.EPERM): // unshare refused: cmd never started
		testfiles.SkipOptional(t, "a mount namespace of its own for the child (unshare(CLONE_NEWNS)): %v; run as root", err)
	case strings.Contains(string(out), roMountFailed):
		testfiles.SkipOptional(t, "a read-only bind mount in the child's mount namespace: %s; run as root (CAP_SYS_ADMIN)", out)
	case err != nil || !strings.Contains(string(out), "--- PASS: TestHelperReadOnlyStore"):
		t.Fatalf("checks on the read-only mount: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// roFixtureEnv names the fixture file TestHelperReadOnlyStore checks; roMountFailed starts what it
// prints when it cannot mount.
const (
	roFixtureEnv  = "ORKPIPE_RO_STORE_FIXTURE"
	roMountFailed = "read-only bind mount failed: "
)

// TestHelperReadOnlyStore is not a test: TestReadOnlyStore runs the test binary with it selected, in
// a mount namespace of its own, to bind-mount the store read-only over itself and check it there.
func TestHelperReadOnlyStore(t *testing.T) {
	path := os.Getenv(roFixtureEnv)
	if path == "" {
		testfiles.SkipHelper(t, "TestReadOnlyStore")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fx roFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	if err := testfiles.BindReadOnly(fx.Dir); err != nil {
		fmt.Println(roMountFailed + err.Error())
		return
	}
	checkUnwritable(t, fx)
}
