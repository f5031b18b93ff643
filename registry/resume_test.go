package registry

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
	"orkpipe/registry/regtest"
)

// TestHelperPullProcess is not a test: TestPullResumeAfterKill runs the test binary with this test
// selected to have a pull in a separate process that it can SIGKILL, and pullInChild to measure a
// pull's peak memory. When the pull completes it prints the process's peak RSS ("VmHWM: N kB").
func TestHelperPullProcess(t *testing.T) {
	if os.Getenv("ORKPIPE_PULL_HELPER") != "1" {
		testfiles.SkipHelper(t, "TestPullResumeAfterKill")
	}
	jobs, _ := strconv.Atoi(os.Getenv("ORKPIPE_PULL_JOBS"))
	_, err := Pull(context.Background(), os.Getenv("ORKPIPE_PULL_REF"), os.Getenv("ORKPIPE_PULL_DST"),
		WithPlainHTTP(os.Getenv("ORKPIPE_PULL_HOST")), WithJobs(max(jobs, 2)))
	if err != nil {
		t.Fatal(err)
	}
	hwm, err := testfiles.StatusKB("VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("VmHWM: %d kB\n", hwm)
}

// pullInChild pulls ref into dst in a child process (jobs ranges at once) and returns its peak RSS
// in bytes.
func pullInChild(t *testing.T, ref, dst, host string, jobs int) int64 {
	t.Helper()
	cmd := testfiles.SelfCommand("-test.run=^TestHelperPullProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "ORKPIPE_PULL_HELPER=1", "ORKPIPE_PULL_REF="+ref, "ORKPIPE_PULL_DST="+dst, "ORKPIPE_PULL_HOST="+host,
		"ORKPIPE_PULL_JOBS="+strconv.Itoa(jobs))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pull in a child process: %v\n%s", err, out)
	}
	n, err := testfiles.StatusField(string(out), "VmHWM")
	if err != nil {
		t.Fatalf("the child's peak RSS: %v\n%s", err, out)
	}
	return n << 10
}

// journalParts returns the journal lines of an interrupted pull.
func journalParts(t *testing.T, dst string, art *Artifact) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	f, err := os.Open(filepath.Join(dst, PartialDir, art.Digest.Hex, "journal"))
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, ok := parseJournalLine(sc.Text()); ok {
			out[k] = true
		}
	}
	return out
}

func TestPullResumeAfterKill(t *testing.T) {
	ctx := ctxT(t)
	proxy := &regtest.FaultProxy{}
	reg := regtest.Start(t, func(h http.Handler) http.Handler { proxy.Next = h; return proxy })
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, "model.orkpack"), 48<<20, 7)
	copyFile(t, testfiles.Path(t, "stories260K.gguf"), filepath.Join(src, "stories260K.gguf"))
	writeProvenance(t, src)
	ref := reg.Ref("packs/resume", "v1")
	res, err := Push(ctx, src, ref, plain(reg), testRange)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, f := range res.Artifact.Files {
		total += f.StoredSize()
	}
	dst := filepath.Join(t.TempDir(), "out")
	proxy.Throttle.Store(int64(2 * time.Millisecond))

	prev := 0
	for round := 1; round <= 3; round++ {
		start := proxy.BlobBytes.Load()
		cmd := testfiles.SelfCommand("-test.run=^TestHelperPullProcess$")
		cmd.Env = append(os.Environ(), "ORKPIPE_PULL_HELPER=1", "ORKPIPE_PULL_REF="+ref, "ORKPIPE_PULL_DST="+dst, "ORKPIPE_PULL_HOST="+reg.Host)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill once this run has moved a quarter of the whole artifact.
		for proxy.BlobBytes.Load()-start < total/4 {
			time.Sleep(time.Millisecond)
		}
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		cmd.Wait()
		noPulledFiles(t, dst)
		done := len(journalParts(t, dst, res.Artifact))
		t.Logf("round %d: killed after %d bytes; %d ranges verified so far", round, proxy.BlobBytes.Load()-start, done)
		if done <= prev {
			t.Fatalf("round %d: no progress (%d verified ranges, %d before)", round, done, prev)
		}
		prev = done
	}

	// What the resumed pull must still fetch: the stored bytes of ranges not journaled as verified.
	journal := journalParts(t, dst, res.Artifact)
	var want int64
	for _, f := range res.Artifact.Files {
		for k, r := range f.Ranges {
			if !journal[journalKey(f.Name, k, rangeDigest(f, k))] {
				want += r.Stored.Len
			}
		}
	}
	proxy.Throttle.Store(0)
	// The killed process's connections may still be draining on the server side: wait until the
	// counter is quiet so that only the resumed pull's bytes are measured.
	for last := int64(-1); last != proxy.BlobBytes.Load(); {
		last = proxy.BlobBytes.Load()
		time.Sleep(300 * time.Millisecond)
	}
	start := proxy.BlobBytes.Load()
	pr, err := Pull(ctx, ref, dst, plain(reg), WithJobs(2))
	if err != nil {
		t.Fatal(err)
	}
	got := proxy.BlobBytes.Load() - start
	resumed := 0
	for _, f := range pr.Files {
		resumed += f.Resumed
	}
	t.Logf("resume: %d of %d bytes transferred (expected %d); %d ranges reused", got, total, want, resumed)
	if got != want {
		t.Errorf("resumed pull transferred %d bytes, want exactly the %d bytes of unverified ranges", got, want)
	}
	if resumed != len(journal) {
		t.Errorf("reused %d ranges, journal has %d", resumed, len(journal))
	}
	sameFiles(t, src, dst)
}
