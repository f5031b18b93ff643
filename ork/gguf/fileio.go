package gguf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"orkpipe/ork/internal/durable"
)

// copyRangeRW copies n bytes by pread/pwrite through buf.
func copyRangeRW(dst, src *os.File, dstOff, srcOff, n int64, buf []byte) error {
	for n > 0 {
		m := min(int64(len(buf)), n)
		if _, err := src.ReadAt(buf[:m], srcOff); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if _, err := dst.WriteAt(buf[:m], dstOff); err != nil {
			return err
		}
		srcOff, dstOff, n = srcOff+m, dstOff+m, n-m
	}
	return nil
}

// linkNoReplace moves oldpath to newpath without replacing an existing newpath, by hard link
// then unlink (for filesystems without RENAME_NOREPLACE).
func linkNoReplace(oldpath, newpath string) error {
	if err := os.Link(oldpath, newpath); err != nil {
		return err
	}
	return os.Remove(oldpath)
}

// commitFile fsyncs tmp, renames it to dst (replacing dst only when replace) and fsyncs the
// directory.
func commitFile(tmp *os.File, dst string, replace bool) error {
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	var err error
	if replace {
		err = os.Rename(tmp.Name(), dst)
	} else {
		err = renameNoReplace(tmp.Name(), dst)
	}
	if err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(dst))
}
