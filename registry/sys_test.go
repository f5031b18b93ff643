package registry

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRenameNoReplace: both ways of renaming (the kernel's RENAME_NOREPLACE where there is one, and
// link-and-remove, what other systems and other filesystems get) move a file to a free name and
// refuse an existing one, leaving both files as they were.
func TestRenameNoReplace(t *testing.T) {
	for name, rename := range map[string]func(src, dst string) error{
		"renameNoReplace": renameNoReplace,
		"linkAndRemove":   linkAndRemove,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
			writeString(t, src, "new")
			writeString(t, dst, "old")
			if err := rename(src, dst); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("rename onto an existing file: err %v, want fs.ErrExist", err)
			}
			if got := readString(t, src); got != "new" {
				t.Errorf("src after the refused rename: %q", got)
			}
			if got := readString(t, dst); got != "old" {
				t.Errorf("dst after the refused rename: %q, want it untouched", got)
			}
			if err := os.Remove(dst); err != nil {
				t.Fatal(err)
			}
			if err := rename(src, dst); err != nil {
				t.Fatalf("rename to a free name: %v", err)
			}
			if got := readString(t, dst); got != "new" {
				t.Errorf("dst after the rename: %q", got)
			}
			if _, err := os.Lstat(src); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("src after the rename: %v, want it gone", err)
			}
		})
	}
}

// TestSameFile: a push's check that a file did not change notices a rewrite of the same size, a
// change of mode (ctime only), a replacement and a truncation, and nothing else.
func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, tc := range []struct {
		name    string
		change  func()
		changed bool
	}{
		{"nothing", func() {}, false},
		{"read", func() { readString(t, path) }, false},
		{"rewritten, same size", func() { writeString(t, path, "xbcdef") }, true},
		{"chmod", func() { os.Chmod(path, 0o600) }, true},
		{"replaced", func() {
			writeString(t, path+".new", "abcdef")
			os.Rename(path+".new", path)
		}, true},
		{"truncated", func() { os.Truncate(path, 3) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeString(t, path, "abcdef")
			os.Chmod(path, 0o644)
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			// File times have the granularity of the kernel's coarse clock: make sure a change
			// lands on a later tick than the write above.
			time.Sleep(20 * time.Millisecond)
			tc.change()
			err = sameFile(path, st)
			switch {
			case tc.changed && (err == nil || !strings.Contains(err.Error(), path)):
				t.Errorf("sameFile after the change: %v, want an error naming %s", err, path)
			case !tc.changed && err != nil:
				t.Errorf("sameFile of an unchanged file: %v", err)
			}
		})
	}
}

func writeString(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
