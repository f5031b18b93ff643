package artifacts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// copyAndHash copies the logical content of src (size bytes) into dst, which must be empty, and
// returns the BLAKE3 of src's bytes. The copy is made by the kernel: a reflink (FICLONE) where the
// filesystem shares extents (btrfs, XFS), after which src is hashed on all CPUs; else
// copy_file_range(2) of each data segment, so holes stay holes and no byte passes through user
// space, while the hash runs on the other CPUs (from the page cache); only filesystems that
// support neither get a user-space sparse copy. The whole operation costs about one read plus one
// kernel copy (alternatives measured and rejected: docs/performance.md).
//
// The digest covers src, not dst: the caller must check afterwards that src did not change
// (unchanged) — then dst holds the same bytes, because the kernel copied exactly the ranges that
// were hashed. That is the same guarantee a user-space copy that hashes its own buffer gives.
func copyAndHash(ctx context.Context, src, dst *os.File, size int64) (Digest, error) {
	if size == 0 {
		return SumBytes(nil), nil
	}
	if err := cloneFile(dst, src); err == nil {
		// A reflink moves no bytes: hash on all CPUs.
		return hashOpenFile(ctx, src, size)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	copied := make(chan error, 1)
	go func() {
		err := kernelCopy(ctx, src, dst, size, false, true)
		if err != nil {
			cancel() // stop hashing too
		}
		copied <- err
	}()
	// The copy keeps one CPU busy: hash on the others (docs/performance.md).
	var d Digest
	var herr error
	if size > PieceSize {
		d, herr = hashParallel(ctx, src, size, max(1, runtime.GOMAXPROCS(0)-1))
	} else {
		d, herr = hashSerial(ctx, src, size)
	}
	if herr != nil {
		cancel()
	}
	if cerr := <-copied; cerr != nil {
		return Digest{}, cerr
	}
	if herr != nil {
		return Digest{}, herr
	}
	return d, nil
}

// kernelCopy copies src's data segments into dst at the same offsets and sets dst's size: a
// reflink if clone and the filesystem shares extents, else copy_file_range per data segment. With
// kernel false (tests) it goes straight to the user-space fallback.
func kernelCopy(ctx context.Context, src, dst *os.File, size int64, clone, kernel bool) error {
	if kernel && clone {
		if err := cloneFile(dst, src); err == nil {
			return nil
		}
	}
	// No reflink here (ext4, tmpfs, across filesystems): copy_file_range per data segment.
	useCFR := kernel
	buf := blockPool.Get().(*[]byte)
	defer blockPool.Put(buf)
	err := segments(src, size, func(off, n int64) error {
		for end := off + n; off < end; {
			if err := ctx.Err(); err != nil {
				return err
			}
			want := min(end-off, 64<<20)
			if useCFR {
				roff, woff := off, off
				got, err := copyRange(src, dst, &roff, &woff, int(want))
				switch {
				case err == nil && got > 0:
					// Start writing the copied range to disk now, so that the fsync before
					// the object is linked in finds little left to do.
					StartWriteback(dst, off, int64(got))
					off += int64(got)
					continue
				case err == nil: // 0 bytes: src is shorter than its size said
					return fmt.Errorf("copy %s: file ended at %d, expected %d bytes (changed while reading?)", src.Name(), off, size)
				case errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL):
					useCFR = false // fall through to the user-space copy
				case errors.Is(err, unix.EINTR):
					continue
				default:
					return fmt.Errorf("copy %s to %s at %d: %w", src.Name(), dst.Name(), off, err)
				}
			}
			k := min(want, int64(len(*buf)))
			got, err := src.ReadAt((*buf)[:k], off)
			if int64(got) < k {
				if err == nil {
					err = fmt.Errorf("short read")
				}
				return fmt.Errorf("copy %s at %d: file ended at %d, expected %d bytes (changed while reading?): %w", src.Name(), off, off+int64(got), size, err)
			}
			if err := writeSparse(dst, off, (*buf)[:k]); err != nil {
				return err
			}
			off += k
		}
		return nil
	})
	if err != nil {
		return err
	}
	return dst.Truncate(size)
}
