package gguf

import (
	"bytes"
	"context"
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
func commitFile(tmp *os.File, name, dst string, replace bool) error {
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", name, err)
	}
	// Renamed while still open: its lock (durable.CreateTemp) is held until it is dst.
	var err error
	if replace {
		err = os.Rename(name, dst)
	} else {
		err = renameNoReplace(name, dst)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(dst))
}

// sameBytes reports whether the file at path holds exactly the first n bytes of f (and no more),
// reading both in 1 MiB chunks.
func sameBytes(ctx context.Context, f *os.File, path string, n int64) (bool, error) {
	g, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer g.Close()
	if st, err := g.Stat(); err != nil || st.Size() != n {
		return false, err
	}
	a, b := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); off < n; off += int64(len(a)) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		m := int(min(int64(len(a)), n-off))
		if _, err := f.ReadAt(a[:m], off); err != nil {
			return false, err
		}
		if _, err := g.ReadAt(b[:m], off); err != nil {
			return false, err
		}
		if !bytes.Equal(a[:m], b[:m]) {
			return false, nil
		}
	}
	return true, nil
}
