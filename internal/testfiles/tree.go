//go:build unix

package testfiles

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Tree returns what a write under dir would change, per entry (dir included): its mode, inode,
// size and modification time, for SameTree.
func Tree(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		m[p] = fmt.Sprintf("mode %v inode %d size %d mtime %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Ino, fi.Size(), fi.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// SameTree fails the test for each entry created, removed or changed between two Trees of a
// directory.
func SameTree(tb testing.TB, before, after map[string]string) {
	tb.Helper()
	for p, b := range before {
		if a, ok := after[p]; !ok {
			tb.Errorf("%s: removed", p)
		} else if a != b {
			tb.Errorf("%s: changed: %s, was %s", p, a, b)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			tb.Errorf("%s: created", p)
		}
	}
}

// DenyWrites takes the write permission off every entry under dir (chmod -R a-w), as on another
// user's directory, and gives the owner's back when the test ends. It binds a process that is not
// root only: root writes through any permission.
func DenyWrites(tb testing.TB, dir string) {
	tb.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type()&fs.ModeSymlink == 0 {
			paths = append(paths, p)
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	chmod := func(p string, set, clear fs.FileMode) {
		fi, err := os.Lstat(p)
		if err == nil {
			err = os.Chmod(p, fi.Mode().Perm()&^clear|set)
		}
		if err != nil {
			tb.Error(err)
		}
	}
	tb.Cleanup(func() {
		for _, p := range paths {
			chmod(p, 0o200, 0)
		}
	})
	for i := len(paths) - 1; i >= 0; i-- { // a directory after what it holds
		chmod(paths[i], 0, 0o222)
	}
}
