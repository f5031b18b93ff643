package artifacts

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A file that appears at the destination while Materialize writes (another build writing the same
// outputs into the same directory) is kept when it holds the object's bytes, refused when it does
// not, and replaced by Force.
func TestMaterializeFileAppears(t *testing.T) {
	for _, copyMode := range []bool{false, true} {
		name := map[bool]string{false: "hardlink", true: "copy"}[copyMode]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTestStore(t)
			s.forceCopy = copyMode
			pack := pattern("pack", 200000)
			o := mustIngest(t, s, pack)
			out := t.TempDir()
			for _, c := range []struct {
				name    string
				put     func(t *testing.T, dst string) // what the other process writes
				force   bool
				wantErr error
				want    []byte
			}{
				{name: "a hard link to the object", put: func(t *testing.T, dst string) {
					if err := os.Link(s.objectPath(o.Digest), dst); err != nil {
						t.Fatal(err)
					}
				}, want: pack},
				{name: "a copy of the same bytes", put: func(t *testing.T, dst string) {
					if err := os.WriteFile(dst, pack, 0o444); err != nil {
						t.Fatal(err)
					}
				}, want: pack},
				{name: "other bytes", put: func(t *testing.T, dst string) {
					os.WriteFile(dst, []byte("the user's file"), 0o644)
				}, wantErr: ErrClobber, want: []byte("the user's file")},
				{name: "other bytes, forced", put: func(t *testing.T, dst string) {
					os.WriteFile(dst, []byte("the user's file"), 0o644)
				}, force: true, want: pack},
			} {
				dst := filepath.Join(out, strings.ReplaceAll(c.name, " ", "-"))
				s.beforeRename = func(p string) { c.put(t, p) }
				_, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{Force: c.force})
				s.beforeRename = nil
				if !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
					t.Fatalf("%s: Materialize: %v, want %v", c.name, err, c.wantErr)
				}
				if err != nil && !strings.Contains(err.Error(), "appeared while materializing") {
					t.Fatalf("%s: %q does not say the file appeared meanwhile", c.name, err)
				}
				if got, err := os.ReadFile(dst); err != nil || string(got) != string(c.want) {
					t.Fatalf("%s: %s holds %d bytes (%v), want %d", c.name, dst, len(got), err, len(c.want))
				}
				if c.wantErr == nil {
					if !s.InPlace(ctx, o.Digest, dst) {
						t.Fatalf("%s: the kept file is not journaled as the object", c.name)
					}
				}
			}
			if left := temps(t, out); len(left) > 0 {
				t.Fatalf("temp files left: %v", left)
			}
		})
	}
}

// The temp files of a killed Materialize are removed by the next Materialize into their directory;
// a live writer's (locked), a copy's young .new file (it may not be locked yet) and other files are
// not.
func TestMaterializeSweepsDeadTemps(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	pack := pattern("pack", 200000)
	o := mustIngest(t, s, pack)
	out := t.TempDir()
	old := time.Now().Add(-2 * liveTempAge)
	write := func(name string, mtime time.Time) string {
		p := filepath.Join(out, name)
		if err := os.WriteFile(p, pack, 0o444); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	deadCopy := write(tempPrefix+"0000000000000001"+tempSuffix, old)
	deadLink := filepath.Join(out, tempPrefix+"0000000000000002"+tempSuffix)
	if err := os.Link(s.objectPath(o.Digest), deadLink); err != nil {
		t.Fatal(err)
	}
	freshDead := write(tempPrefix+"0000000000000003"+tempSuffix, time.Now()) // a build killed a moment ago
	youngNew := write(tempPrefix+"0000000000000006"+newSuffix, time.Now())   // between creation and lock
	oldNew := write(tempPrefix+"0000000000000007"+newSuffix, old)
	otherTemp := write(tempPrefix+"1234567890"+tempSuffix, old) // another writer's (os.CreateTemp) name
	liveCopy := write(tempPrefix+"0000000000000004"+tempSuffix, old)
	live, err := os.Open(liveCopy)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := unix.Flock(int(live.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	liveLink := filepath.Join(out, tempPrefix+"0000000000000005"+tempSuffix)
	obj, err := os.Open(s.objectPath(o.Digest))
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if err := unix.Flock(int(obj.Fd()), unix.LOCK_SH); err != nil { // as placeAt does before linking
		t.Fatal(err)
	}
	if err := os.Link(s.objectPath(o.Digest), liveLink); err != nil {
		t.Fatal(err)
	}
	userFile := write(".orkpipe-notes.txt", old)

	if _, err := s.Materialize(ctx, o.Digest, filepath.Join(out, "model.orkpack"), MaterializeOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		kept bool
	}{{deadCopy, false}, {freshDead, false}, {youngNew, true}, {oldNew, false}, {otherTemp, true}, {liveCopy, true}, {liveLink, true}, {userFile, true}} {
		if _, err := os.Lstat(c.path); (err == nil) != c.kept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(c.path), err == nil, c.kept)
		}
	}
	// The dead hard link was seen locked while liveLink's writer holds the object: released, the
	// next Store's Materialize removes it.
	obj.Close()
	if _, err := os.Lstat(deadLink); err != nil {
		t.Fatalf("the dead link went while a live writer held the object: %v", err)
	}
	s2 := openTestStoreAt(t, s.Dir())
	if _, err := s2.Materialize(ctx, o.Digest, filepath.Join(out, "model.orkpack"), MaterializeOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{deadLink, liveLink} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s: not removed once no writer held it", filepath.Base(p))
		}
	}
	if got, err := os.ReadFile(filepath.Join(out, "model.orkpack")); err != nil || string(got) != string(pack) {
		t.Fatalf("model.orkpack: %d bytes, %v", len(got), err)
	}
}

// temps lists the Materialize temp files (.tmp and .new) in dir.
func temps(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if tempName(e.Name()) != "" {
			names = append(names, e.Name())
		}
	}
	return names
}

// While Materialize writes, its temp file is locked: another Store sweeping the directory leaves it,
// even when it looks old.
func TestMaterializeTempHeldWhileWriting(t *testing.T) {
	for _, copyMode := range []bool{false, true} {
		name := map[bool]string{false: "hardlink", true: "copy"}[copyMode]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTestStore(t)
			s.forceCopy = copyMode
			o := mustIngest(t, s, pattern("pack", 200000))
			out := t.TempDir()
			other := openTestStoreAt(t, s.Dir())
			var seen []string
			s.beforeRename = func(string) {
				seen = temps(t, out)
				old := time.Now().Add(-2 * liveTempAge)
				for _, name := range seen {
					if copyMode {
						os.Chtimes(filepath.Join(out, name), old, old)
					}
				}
				other.sweepTemps(out)
			}
			if _, err := s.Materialize(ctx, o.Digest, filepath.Join(out, "model.orkpack"), MaterializeOptions{}); err != nil {
				t.Fatalf("Materialize with another Store sweeping meanwhile: %v", err)
			}
			if len(seen) != 1 {
				t.Fatalf("temp files while writing: %v, want one", seen)
			}
			if left := temps(t, out); len(left) > 0 {
				t.Fatalf("temp files left: %v", left)
			}
		})
	}
}

// GC removes the per-key lock files and the temp files killed writers left in the store outside a
// session once they are older than liveTempAge; fresh ones (a writer may be at work) and other
// files stay.
func TestGCPrunesLocksAndStaleTemps(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	for i := range 3 {
		unlock, err := s.LockKey(ctx, SumBytes([]byte{byte(i)}))
		if err != nil {
			t.Fatal(err)
		}
		unlock()
	}
	old := time.Now().Add(-2 * liveTempAge)
	file := func(rel string, mtime time.Time) string {
		p := filepath.Join(s.Dir(), rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := []string{
		file(".rec-123", old),
		file("history/target/.orkpipe-1.tmp", old),
		file("history/_rates.orkpipe-x/.tmp-2", old),
	}
	kept := []string{
		file(".rec-456", time.Now()),
		file("history/target/.orkpipe-3.tmp", time.Now()),
		file("history/target/memo", old),
		file("history/target/costs.lock", old),
	}
	rep, err := s.GC(ctx, GCOptions{MaxAge: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Locks != 3 || rep.TempFiles != len(stale) {
		t.Fatalf("GC removed %d lock files and %d temp files, want 3 and %d", rep.Locks, rep.TempFiles, len(stale))
	}
	for _, p := range stale {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s: not removed", p)
		}
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: removed", p)
		}
	}
	if got := objectCount(t, filepath.Join(s.Dir(), "locks")); got != 0 {
		t.Fatalf("%d lock files left", got)
	}
	// Keys lock again after GC.
	unlock, err := s.LockKey(ctx, SumBytes([]byte{0}))
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

// objectCount counts the regular files under dir.
func objectCount(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A wait for the store (held by GC) or for a node's key lock (another process doing the same work)
// is logged, not silent.
func TestLockWaitsAreLogged(t *testing.T) {
	ctx := context.Background()
	var buf syncBuffer
	defer func(l *slog.Logger) { slog.SetDefault(l) }(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer func(d time.Duration) { lockPatience = d }(lockPatience)
	lockPatience = 10 * time.Millisecond

	s := openTestStore(t)
	key := SumBytes([]byte("node"))
	unlock, err := s.LockKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	other, err := OpenStore(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		u, err := other.LockKey(ctx, key)
		if err == nil {
			u()
		}
		got <- errors.Join(err, other.Close())
	}()
	waitFor(t, &buf, "waiting for another build doing the same work")
	unlock()
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	gc, err := os.Open(filepath.Join(s.Dir(), "store.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	s.Close() // its shared lock would keep GC's exclusive one out
	if err := unix.Flock(int(gc.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		s2, err := OpenStore(s.Dir())
		if err == nil {
			s2.Close()
		}
		opened <- err
	}()
	waitFor(t, &buf, "waiting for the cache: another orkpipe process holds it exclusively")
	unix.Flock(int(gc.Fd()), unix.LOCK_UN)
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's and a test's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor waits up to a minute for the log to hold want.
func waitFor(t *testing.T, log *syncBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(log.String(), want); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged:\n%s", want, log.String())
		}
	}
}

// CreateTemp's file is locked while open, so another writer's sweep leaves it; the temp files of
// writers that were killed (their lock gone with them) are removed by the next CreateTemp in the
// directory, a young .new (maybe not locked yet) and other files are not.
func TestCreateTempSweepsDeadWriters(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "page.html")
	old := time.Now().Add(-2 * liveTempAge)
	write := func(name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("half a page"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := write(tempPrefix+"0000000000000001"+tempSuffix, time.Now())
	deadNew := write(tempPrefix+"0000000000000002"+newSuffix, old)
	youngNew := write(tempPrefix+"0000000000000003"+newSuffix, time.Now())
	user := write(".page.html.swp", old)

	f, name, err := CreateTemp(dst)
	if err != nil {
		t.Fatal(err)
	}
	if tempName(filepath.Base(name)) != tempSuffix || filepath.Dir(name) != dir {
		t.Fatalf("temp file %s: want %s<16 hex>%s in %s", name, tempPrefix, tempSuffix, dir)
	}
	for _, c := range []struct {
		path string
		kept bool
	}{{dead, false}, {deadNew, false}, {youngNew, true}, {user, true}} {
		if _, err := os.Lstat(c.path); (err == nil) != c.kept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(c.path), err == nil, c.kept)
		}
	}
	// Live: another writer's sweep leaves it, even when it looks old.
	os.Chtimes(name, old, old)
	f2, name2, err := CreateTemp(filepath.Join(dir, "other.html"))
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(name2)
	f2.Close()
	if _, err := os.Lstat(name); err != nil {
		t.Fatalf("a live writer's temp file was swept: %v", err)
	}
	if _, err := f.WriteString("the page"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(name, dst); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, err := os.ReadFile(dst); err != nil || string(b) != "the page" {
		t.Fatalf("%s: %q, %v", dst, b, err)
	}
}
