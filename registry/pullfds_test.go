package registry

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

// fdLimit is the RLIMIT_NOFILE soft limit of TestPullManyFilesFewDescriptors's child: far fewer
// descriptors than the artifact has files.
const fdLimit = 128

// TestHelperPullFDLimit is not a test: TestPullManyFilesFewDescriptors runs the test binary with
// this test selected to pull under a lowered RLIMIT_NOFILE (fdLimit) in a process of its own.
func TestHelperPullFDLimit(t *testing.T) {
	if os.Getenv("ORKPIPE_PULL_FDLIMIT_HELPER") != "1" {
		testfiles.SkipHelper(t, "TestPullManyFilesFewDescriptors")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = fdLimit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	_, err := Pull(context.Background(), os.Getenv("ORKPIPE_PULL_REF"), os.Getenv("ORKPIPE_PULL_DST"),
		WithPlainHTTP(os.Getenv("ORKPIPE_PULL_HOST")), WithJobs(8))
	if err != nil {
		t.Fatal(err)
	}
}

// TestPullManyFilesFewDescriptors: pull opened the partial file of every file of the artifact
// before downloading any and held them all to the end, so an artifact of more files than the
// process may open descriptors (1500 under ulimit -n 1024) failed with "too many open files". A
// pull of 300 files in a process limited to fdLimit descriptors must deliver them all.
func TestPullManyFilesFewDescriptors(t *testing.T) {
	if runtime.GOOS != "linux" {
		testfiles.SkipBuild(t, "the descriptor limit is lowered with setrlimit(2) in a child as Linux allows; other systems pull the same code")
	}
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	src := t.TempDir()
	const files = 300
	for i := range files {
		// Small files of distinct contents, some of several ranges.
		size := int64(100 + i*37)
		if i%50 == 0 {
			size = 3*MinRangeSize + int64(i)
		}
		writeText(t, filepath.Join(src, fmt.Sprintf("part-%03d.txt", i)), size, []Extent{{Off: 0, Len: size}}, uint64(i))
	}
	writeProvenance(t, src)
	ref := reg.Ref("packs/many", "v1")
	if _, err := Push(ctx, src, ref, plain(reg), testRange, WithJobs(8)); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	cmd := testfiles.SelfCommand("-test.run=^TestHelperPullFDLimit$", "-test.v")
	cmd.Env = append(os.Environ(), "ORKPIPE_PULL_FDLIMIT_HELPER=1", "ORKPIPE_PULL_REF="+ref, "ORKPIPE_PULL_DST="+dst, "ORKPIPE_PULL_HOST="+reg.Host)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pull of %d files with at most %d descriptors: %v\n%s", files+1, fdLimit, err, out)
	}
	sameFiles(t, src, dst)
}
