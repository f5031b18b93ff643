//go:build unix

package model

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapTensorBytes maps bytes [off, off+n) of f (named name in errors) read-only and shared (the page
// cache's own pages, no copy) and returns them with the function that unmaps them. The file must still
// be size bytes long, the size the caller parsed: a file that changed since is an error, not a
// mapping. f is the descriptor the model was parsed from, never its path opened again (the path may
// name another file by now).
func mapTensorBytes(f *os.File, name string, size, off, n int64) ([]byte, func(), error) {
	if n <= 0 || off < 0 || off+n > size {
		return nil, nil, fmt.Errorf("%s: mapping bytes [%d, %d) of a file of %d: %w", name, off, off+n, size, ErrBadModel)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if st.Size() != size {
		return nil, nil, fmt.Errorf("%s: %d bytes, %d when it was opened: the file changed: %w", name, st.Size(), size, ErrBadModel)
	}
	page := int64(os.Getpagesize())
	start := off / page * page
	m, err := unix.Mmap(int(f.Fd()), start, int(off+n-start), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: mapping bytes [%d, %d): %w", name, start, off+n, err)
	}
	return m[off-start:], func() {
		if err := unix.Munmap(m); err != nil {
			panic(fmt.Sprintf("%s: unmapping a weight's %d bytes: %v", name, len(m), err)) // the mapping is ours: a bug
		}
	}, nil
}

// canMapTensors reports whether mapTensorBytes maps (else GGUFSource.MapEncoded reads).
const canMapTensors = true
