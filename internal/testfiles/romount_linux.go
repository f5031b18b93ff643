package testfiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// roMountEnv names the file that tells a ReadOnlyMountChild its directory and payload;
// roMountFailed starts what the child prints when it cannot mount.
const (
	roMountEnv    = "ORKPIPE_RO_MOUNT_FIXTURE"
	roMountFailed = "read-only bind mount failed: "
)

// roMount is what InReadOnlyMount hands its child.
type roMount struct {
	Dir     string          `json:"dir"`
	Payload json.RawMessage `json:"payload"`
}

// InReadOnlyMount runs the test binary's helper test (a TestHelper... function that calls
// ReadOnlyMountChild) in a child process with a mount namespace of its own, where dir is
// bind-mounted read-only over itself and payload (JSON) is handed to the helper: root writes through
// any permission, and only a read-only mount stops it. t fails with the child's output when the
// helper does not pass; it skips (SkipOptional) where the child gets no mount namespace or no bind
// mount (not root).
func InReadOnlyMount(t *testing.T, helper, dir string, payload any) {
	t.Helper()
	p, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(roMount{Dir: dir, Payload: p})
	if err != nil {
		t.Fatal(err)
	}
	fixture := filepath.Join(t.TempDir(), "ro-mount.json")
	if err := os.WriteFile(fixture, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := SelfCommand("-test.run=^"+helper+"$", "-test.v")
	cmd.Env = append(os.Environ(), roMountEnv+"="+fixture)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	switch {
	case errors.Is(err, syscall.EPERM): // unshare refused: cmd never started
		SkipOptional(t, "a mount namespace of its own for the child (unshare(CLONE_NEWNS)): %v; run as root", err)
	case strings.Contains(string(out), roMountFailed):
		SkipOptional(t, "a read-only bind mount in the child's mount namespace: %s; run as root (CAP_SYS_ADMIN)", out)
	case err != nil || !strings.Contains(string(out), "--- PASS: "+helper):
		t.Fatalf("%s on the read-only mount of %s: %v\n%s", helper, dir, err, out)
	}
	t.Logf("%s", out)
}

// ReadOnlyMountChild is the helper's side of InReadOnlyMount, parent the test that runs it. Run as a
// test of its own, the helper skips (SkipHelper). In InReadOnlyMount's child it bind-mounts the
// directory read-only (BindReadOnly), decodes the payload into v and returns true; when the mount
// fails it prints why (InReadOnlyMount then skips) and returns false.
func ReadOnlyMountChild(t *testing.T, parent string, v any) bool {
	t.Helper()
	path := os.Getenv(roMountEnv)
	if path == "" {
		SkipHelper(t, parent)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m roMount
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m.Payload, v); err != nil {
		t.Fatal(err)
	}
	if err := BindReadOnly(m.Dir); err != nil {
		fmt.Println(roMountFailed + err.Error())
		return false
	}
	return true
}
