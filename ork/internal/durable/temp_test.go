package durable

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// CreateTemp's file is locked while open, under its .tmp name; a killed writer's (its lock free) is
// removed by the next CreateTemp for the same destination, a young .new (maybe not locked yet), a
// live writer's and other files are not.
func TestCreateTempSweepsDeadWriters(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "m.gguf")
	old := time.Now().Add(-2 * youngTemp)
	file := func(name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := file(".m.gguf.0123456789abcdef.tmp", time.Now()) // killed a moment ago
	oldNew := file(".m.gguf.0123456789abcde0.new", old)
	youngNew := file(".m.gguf.0123456789abcde1.new", time.Now())
	otherDst := file(".n.gguf.0123456789abcde2.tmp", old)
	notOurs := file(".m.gguf.tmp-123456", old) // another writer's name
	live, liveName, err := CreateTemp(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if liveName != filepath.Join(dir, filepath.Base(liveName)) || filepath.Ext(liveName) != ".tmp" {
		t.Fatalf("temp name %s", liveName)
	}
	if other, err := os.Open(liveName); err != nil {
		t.Fatal(err)
	} else {
		if err := unix.Flock(int(other.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			t.Error("the temp file is not locked while its writer holds it")
		}
		other.Close()
	}
	second, secondName, err := CreateTemp(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	for _, c := range []struct {
		path string
		kept bool
	}{{dead, false}, {oldNew, false}, {youngNew, true}, {otherDst, true}, {notOurs, true}, {liveName, true}, {secondName, true}} {
		if _, err := os.Lstat(c.path); (err == nil) != c.kept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(c.path), err == nil, c.kept)
		}
	}
}
