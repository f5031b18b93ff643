package artifacts

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
)

// Child processes: the test binary re-executes itself with ARTIFACTS_CHILD set (the os.Args[0] +
// env-var pattern) to play a second orkpipe process on the same store.
const childEnv = "ARTIFACTS_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if err := runChild(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(mode string) error {
	ctx := context.Background()
	if mode == "hash-rss" {
		return hashPeakRSS(ctx, os.Getenv("FILE"))
	}
	s, err := OpenStore(os.Getenv("STORE"))
	if err != nil {
		return err
	}
	defer s.Close()
	size, _ := strconv.ParseInt(os.Getenv("SIZE"), 10, 64)
	switch mode {
	case "slow-ingest":
		r := &slowReader{r: newPatternReader(os.Getenv("SEED"), size), announceAt: 64 << 20}
		_, err := s.Ingest(ctx, r)
		return err
	case "ingest":
		o, err := s.Ingest(ctx, newPatternReader(os.Getenv("SEED"), size))
		if err != nil {
			return err
		}
		fmt.Println(o.Digest)
		return nil
	case "lock":
		return lockedWork(ctx, s, os.Getenv("KEYS"), os.Getenv("WORK"))
	}
	return fmt.Errorf("unknown child mode %q", mode)
}

// slowReader sleeps between megabytes and prints WRITING once announceAt bytes were delivered.
type slowReader struct {
	r          io.Reader
	n          int64
	announceAt int64
	announced  bool
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(p) > 1<<20 {
		p = p[:1<<20]
	}
	n, err := r.r.Read(p)
	r.n += int64(n)
	if !r.announced && r.n >= r.announceAt {
		r.announced = true
		fmt.Println("WRITING")
	}
	time.Sleep(2 * time.Millisecond)
	return n, err
}

// lockedWork "executes" each node key once: under LockKey, it skips keys whose output marker
// exists, else it works for a while and appends a line to the execution log.
func lockedWork(ctx context.Context, s *Store, keys, work string) error {
	for _, k := range strings.Split(keys, ",") {
		key := SumBytes([]byte(k))
		unlock, err := s.LockKey(ctx, key)
		if err != nil {
			return err
		}
		marker := filepath.Join(work, k+".done")
		if _, err := os.Stat(marker); os.IsNotExist(err) {
			time.Sleep(30 * time.Millisecond)
			f, err := os.OpenFile(filepath.Join(work, "log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			fmt.Fprintf(f, "%s %d\n", k, os.Getpid())
			f.Close()
			if err := os.WriteFile(marker, nil, 0o644); err != nil {
				return err
			}
		}
		if err := unlock(); err != nil {
			return err
		}
	}
	return nil
}

func child(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := testfiles.SelfCommand("-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{childEnv + "=" + mode}, env...)...)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestCrashMidIngestLeavesNoObject(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "writes up to 512 MiB")
	}
	dir := filepath.Join(t.TempDir(), "cache")
	const size = 512 << 20
	want, n, err := SumReader(newPatternReader("crash", size))
	if err != nil || n != size {
		t.Fatal(err)
	}
	if _, err := OpenStore(dir); err != nil { // create the layout
		t.Fatal(err)
	}
	cmd := child(t, "slow-ingest", "STORE="+dir, "SEED=crash", "SIZE="+strconv.Itoa(size))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "WRITING\n" {
		cmd.Process.Kill()
		t.Fatalf("child said %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child exit: %v, want killed", err)
	}
	// The kill happened mid-write: a partial temp file exists in the dead session.
	partial, _ := filepath.Glob(filepath.Join(dir, "tmp", "*", "ingest-*"))
	if len(partial) != 1 {
		t.Fatalf("temp files after the kill: %v, want exactly one partial ingest", partial)
	}
	fi, err := os.Stat(partial[0])
	if err != nil || fi.Size() < 16<<20 || fi.Size() >= size {
		t.Fatalf("partial temp file %v (err %v), want between 16 MiB and 512 MiB", fi.Size(), err)
	}
	t.Logf("killed with %d of %d bytes written to %s", fi.Size(), size, partial[0])

	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if files := objectFiles(t, s); len(files) != 0 {
		t.Fatalf("objects/ holds %v after the crash, want nothing", files)
	}
	if _, err := s.Stat(context.Background(), want); !isNotFound(err) {
		t.Fatalf("Stat(%v) = %v, want ErrNotFound", want, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "tmp", "*", "ingest-*")); len(left) != 0 {
		t.Fatalf("OpenStore did not clean the dead session: %v", left)
	}
	o, err := s.Ingest(context.Background(), newPatternReader("crash", size))
	if err != nil || o.Digest != want || o.Size != size {
		t.Fatalf("new ingest = %v, %v; want %v", o, err, want)
	}
	if err := s.Verify(context.Background(), want); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentIngestGoroutines(t *testing.T) {
	s := openTestStore(t)
	data := pattern("same", 8<<20+5)
	var wg sync.WaitGroup
	res := make([]Object, 32)
	errs := make([]error, 32)
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = s.Ingest(context.Background(), strings.NewReader(string(data)))
		}()
	}
	wg.Wait()
	for i := range 32 {
		if errs[i] != nil || res[i].Digest != SumBytes(data) {
			t.Fatalf("ingest %d: %v, %v", i, res[i], errs[i])
		}
	}
	checkSingleIntactObject(t, s, SumBytes(data))
}

func TestConcurrentIngestProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	const size = 64 << 20
	want, _, _ := SumReader(newPatternReader("two", size))
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for range 2 {
		cmd := child(t, "ingest", "STORE="+dir, "SEED=two", "SIZE="+strconv.Itoa(size))
		var b strings.Builder
		cmd.Stdout = &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &b)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		if got := strings.TrimSpace(outs[i].String()); got != want.String() {
			t.Fatalf("child %d stored %q, want %s", i, got, want)
		}
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkSingleIntactObject(t, s, want)
}

func checkSingleIntactObject(t *testing.T, s *Store, want Digest) {
	t.Helper()
	if files := objectFiles(t, s); len(files) != 1 || files[0] != s.objectPath(want) {
		t.Fatalf("objects/ holds %v, want only %s", files, s.objectPath(want))
	}
	rep, err := s.VerifyAll(context.Background())
	if err != nil || !rep.OK() || rep.Checked != 1 || len(rep.Strays) != 0 {
		t.Fatalf("VerifyAll = %+v, %v; want 1 clean object", rep, err)
	}
}

func TestLockKeyOneExecutionAcrossProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	work := t.TempDir()
	keys := "n1,n2,n3,n4,n5,n6"
	var cmds []*exec.Cmd
	for range 3 {
		cmd := child(t, "lock", "STORE="+dir, "KEYS="+keys, "WORK="+work)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	log, err := os.ReadFile(filepath.Join(work, "log"))
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
		count[strings.Fields(line)[0]]++
	}
	for _, k := range strings.Split(keys, ",") {
		if count[k] != 1 {
			t.Fatalf("node %s executed %d times (log:\n%s), want once", k, count[k], log)
		}
	}
}

func TestLockKeyHonoursContext(t *testing.T) {
	s := openTestStore(t)
	key := SumBytes([]byte("busy"))
	unlock, err := s.LockKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.LockKey(ctx, key); err == nil || ctx.Err() == nil {
		t.Fatalf("second LockKey on a held key: %v, want the context's deadline", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	unlock2, err := s.LockKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	unlock2()
}
