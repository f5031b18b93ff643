package artifacts

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// settle waits until a freshly written file is no longer "racy" (see racyWindow), so that the
// stat cache is allowed to remember it.
func settle() { time.Sleep(racyWindow + 20*time.Millisecond) }

func TestHashFileCachesByStat(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "model.gguf")
	data := pattern("model", 2<<20)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	settle()
	o, err := s.HashFile(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if o.Digest != SumBytes(data) || o.Size != int64(len(data)) {
		t.Fatalf("HashFile = %v, want %v", o, SumBytes(data))
	}
	if _, err := s.HashFile(ctx, p); err != nil {
		t.Fatal(err)
	}
	if n := s.hashes.load(); n != 1 {
		t.Fatalf("%d full hashes for two calls on an unchanged file, want 1 (cache hit)", n)
	}
	// Persisted: another Store on the same dir (another process) reuses it.
	s2, err := OpenStore(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if o2, err := s2.HashFile(ctx, p); err != nil || o2 != o {
		t.Fatalf("second store: %v, %v", o2, err)
	}
	if n := s2.hashes.load(); n != 0 {
		t.Fatalf("second store hashed %d times, want 0", n)
	}
}

// TestHashFileRsyncCase is the board project's stale-binary failure: the content changes but the
// old mtime is restored (rsync -a, touch -d), size unchanged. Only ctime tells.
func TestHashFileRsyncCase(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "ork-binary")
	old := pattern("old build", 1<<20)
	if err := os.WriteFile(p, old, 0o755); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 8, 1, 12, 0, 0, 123456789, time.UTC)
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	settle()
	first, err := s.HashFile(ctx, p)
	if err != nil || first.Digest != SumBytes(old) {
		t.Fatalf("first hash %v, %v", first, err)
	}
	if _, err := s.HashFile(ctx, p); err != nil || s.hashes.load() != 1 {
		t.Fatalf("unchanged file was re-hashed (%d hashes, err %v); the test would prove nothing", s.hashes.load(), err)
	}
	var before unix.Stat_t
	unix.Stat(p, &before)

	fresh := pattern("new build", 1<<20) // same size
	if err := os.WriteFile(p, fresh, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	settle()
	var after unix.Stat_t
	unix.Stat(p, &after)
	if after.Size != before.Size || after.Mtim != before.Mtim || after.Ino != before.Ino || after.Dev != before.Dev {
		t.Fatalf("setup: size/mtime/inode changed (%+v -> %+v); only ctime should differ", before, after)
	}
	got, err := s.HashFile(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != SumBytes(fresh) {
		t.Fatalf("HashFile returned %v (the stale digest was %v), want the new content's %v", got.Digest, first.Digest, SumBytes(fresh))
	}
	if n := s.hashes.load(); n != 2 {
		t.Fatalf("%d hashes, want 2", n)
	}
}

func TestHashFileRacyNotCached(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("just written"), 0o644)
	for range 2 {
		if _, err := s.HashFile(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.hashes.load(); n != 2 {
		t.Fatalf("a file modified within racyWindow was served from the cache (%d hashes, want 2)", n)
	}
}

func TestHashFileErrors(t *testing.T) {
	s := openTestStore(t)
	dir := t.TempDir()
	if _, err := s.HashFile(context.Background(), filepath.Join(dir, "missing")); !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := s.HashFile(context.Background(), dir); err == nil {
		t.Fatal("hashing a directory succeeded")
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
