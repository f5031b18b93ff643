package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

// tmpfsSize is the size of TestPullRefusesOnFullTmpfs's filesystem, half the artifact's data.
const tmpfsSize = 8 << 20

// mountFailed starts what TestHelperPullTmpfs prints when it cannot mount the tmpfs.
const mountFailed = "tmpfs mount failed: "

// TestHelperPullTmpfs is not a test: TestPullRefusesOnFullTmpfs runs the test binary with this test
// selected, in a mount namespace of its own, to mount a tmpfs of tmpfsSize bytes on the destination
// and pull into it. It succeeds when the pull is refused with ErrNoSpace and nothing was written, and
// a pull without the check then fails on the full disk with ENOSPC itself, not retried.
func TestHelperPullTmpfs(t *testing.T) {
	if os.Getenv("ORKPIPE_PULL_TMPFS_HELPER") != "1" {
		testfiles.SkipHelper(t, "TestPullRefusesOnFullTmpfs")
	}
	dst := os.Getenv("ORKPIPE_PULL_DST")
	if err := unix.Mount("tmpfs", dst, "tmpfs", 0, fmt.Sprintf("size=%d", tmpfsSize)); err != nil {
		fmt.Println(mountFailed + err.Error())
		return
	}
	_, err := Pull(context.Background(), os.Getenv("ORKPIPE_PULL_REF"), dst, WithPlainHTTP(os.Getenv("ORKPIPE_PULL_HOST")))
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("pull of 16 MiB of data into a tmpfs of %d bytes: %v, want ErrNoSpace", tmpfsSize, err)
	}
	fmt.Println("refused:", err)
	free, err := freeBytes(dst)
	if err != nil {
		t.Fatal(err)
	}
	if free < tmpfsSize-64<<10 { // the state directory's inodes and journal, no data
		t.Fatalf("after the refusal the tmpfs has %d bytes free of %d: the pull wrote data", free, tmpfsSize)
	}

	// Without the check the disk fills half way: the write's own error, naming the partial file,
	// and no retry (it was "digest mismatch: the range does not decode", retried five times).
	var log bytes.Buffer
	_, err = Pull(context.Background(), os.Getenv("ORKPIPE_PULL_REF"), dst, WithPlainHTTP(os.Getenv("ORKPIPE_PULL_HOST")),
		WithoutSpaceCheck(), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrDigestMismatch) || !strings.Contains(err.Error(), filepath.Join(dst, ".orkpipe-partial")) {
		t.Fatalf("pull without the space check into a tmpfs of %d bytes: %v; want ENOSPC naming the partial file, not a digest mismatch", tmpfsSize, err)
	}
	if strings.Contains(log.String(), "retrying") {
		t.Fatalf("a full disk was retried as a download failure:\n%s", log.String())
	}
	fmt.Println("without the check:", err)
}

// TestPullRefusesOnFullTmpfs is TestPullRefusesWithoutSpace on a real filesystem read by statfs(2):
// a pull of 16 MiB of data into a tmpfs of 8 MiB is refused with ErrNoSpace before anything is
// written (it failed with ENOSPC half way). The tmpfs is mounted by a child in a mount namespace of
// its own, which needs root (CAP_SYS_ADMIN).
func TestPullRefusesOnFullTmpfs(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "big.bin"), 2*tmpfsSize, 5)
	writeProvenance(t, src)
	ref := reg.Ref("packs/tmpfs", "v1")
	if _, err := Push(ctx, src, ref, plain(reg), testRange); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	cmd := testfiles.SelfCommand("-test.run=^TestHelperPullTmpfs$", "-test.v")
	cmd.Env = append(os.Environ(), "ORKPIPE_PULL_TMPFS_HELPER=1", "ORKPIPE_PULL_REF="+ref, "ORKPIPE_PULL_DST="+dst, "ORKPIPE_PULL_HOST="+reg.Host)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	switch {
	case errors.Is(err, syscall.EPERM): // unshare refused: cmd never started
		testfiles.SkipOptional(t, "a mount namespace of its own for the child (unshare(CLONE_NEWNS)): %v; run as root", err)
	case strings.Contains(string(out), mountFailed):
		testfiles.SkipOptional(t, "mounting a tmpfs in the child's mount namespace: %s; run as root (CAP_SYS_ADMIN)", out)
	case err != nil:
		t.Fatalf("pull into a full tmpfs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Errorf("the child's tmpfs leaked into the parent's mount namespace (%d entries in %s)", len(ents), dst)
	}
}
