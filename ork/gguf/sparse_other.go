//go:build !linux

package gguf

import "os"

func nextData(f *os.File, off int64) (int64, error) { return off, nil }

func nextHole(f *os.File, off int64) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func copyRange(dst, src *os.File, dstOff, srcOff, n int64, buf []byte) error {
	return copyRangeRW(dst, src, dstOff, srcOff, n, buf)
}

func renameNoReplace(oldpath, newpath string) error { return linkNoReplace(oldpath, newpath) }
