package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// digHoles turns every all-zero filesystem block of f's data into a hole (fallocate PUNCH_HOLE,
// size kept), as `cp --sparse=always` or `fallocate --dig-holes` would: the logical bytes do not
// change, only how much disk they occupy. The unit is the filesystem's block (st_blksize, at least
// a page), so a file that comes back fully allocated ends with exactly the blocks of a file whose
// zeros were never written. It returns the bytes punched. Ranges already in holes are not read;
// data is mapped piece by piece (populated in one call) and each block is compared with zeros,
// which stops at its first non-zero byte. A filesystem that cannot punch holes leaves f as it is
// (0, nil). f must be open for writing and must not change meanwhile.
func digHoles(ctx context.Context, f *os.File, size int64) (int64, error) {
	st, err := fstat(f)
	if err != nil {
		return 0, err
	}
	blk := int64(os.Getpagesize())
	if b := int64(st.Blksize); b > blk && b <= PieceSize && PieceSize%b == 0 {
		blk = b
	}
	var punched int64
	var runStart, runEnd int64 = -1, -1 // the pending run of zero blocks
	flush := func() error {
		if runStart < 0 {
			return nil
		}
		err := punchHole(f, runStart, runEnd-runStart)
		if err != nil {
			return err
		}
		punched += runEnd - runStart
		runStart, runEnd = -1, -1
		return nil
	}
	var pos int64 // blocks before pos were examined
	err = segments(f, size, func(off, n int64) error {
		start := max(pos, off-off%blk)
		end := min(size, (off+n+blk-1)/blk*blk)
		for piece := start; piece < end; {
			if err := ctx.Err(); err != nil {
				return err
			}
			pend := min(end, (piece/PieceSize+1)*PieceSize)
			err := zeroBlocks(f, piece, pend, blk, func(b int64, zero bool) error {
				switch {
				case !zero:
					return flush()
				case b == runEnd:
					runEnd = min(b+blk, size)
					return nil
				default:
					if err := flush(); err != nil {
						return err
					}
					runStart, runEnd = b, min(b+blk, size)
					return nil
				}
			})
			if err != nil {
				return err
			}
			piece = pend
		}
		pos = end
		return nil
	})
	if err == nil {
		err = flush()
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return punched, nil
	}
	if err != nil {
		return punched, fmt.Errorf("dig holes in %s: %w", f.Name(), err)
	}
	return punched, nil
}

// zeroBlocks calls fn with the offset of each blk block of [start, end) of f (start page-aligned)
// and whether it is all zero, in order: read (zeroBlocksRead), or mapped when the hashes are made
// to map (hashMode mapPieces: tests), where a file that shrank meanwhile raises SIGBUS, recovered as
// an error. Read because the files adopted were just written, and on a PVM guest a file just
// written in small writes sits in the page cache in small folios, whose every first touch of a 4
// KiB page through a mapping traps to the hypervisor; the scan touches each block once, most of them
// only at their first bytes (a data block differs from zeros at once). digHoles of 2 GiB of data
// written in 1 MiB writes: 0.71-0.74 s mapped, 0.082-0.089 s read; written in 4 MiB writes: 0.070-0.074 s
// mapped, 0.088-0.091 s read (session 24, "Hashing, session 24").
func zeroBlocks(f *os.File, start, end, blk int64, fn func(off int64, zero bool) error) (err error) {
	if hashMode != mapPieces {
		return zeroBlocksRead(f, start, end, blk, fn)
	}
	m, err := unix.Mmap(int(f.Fd()), start, int(end-start), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map %s at %d: %w", f.Name(), start, err)
	}
	defer unix.Munmap(m)
	_ = unix.Madvise(m, madvPopulate) // one call instead of a fault per 64 KiB; only a hint
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading %s at %d: fault (%v): file ended before %d bytes (changed while reading?)", f.Name(), start, r, end)
		}
	}()
	for off := int64(0); off < int64(len(m)); off += blk {
		b := m[off:min(int64(len(m)), off+blk)]
		if err := fn(start+off, bytes.Equal(b, zeros()[:len(b)])); err != nil {
			return err
		}
	}
	return nil
}

// zeroBlocksRead is zeroBlocks reading [start, end) with pread into a piece buffer (end-start is at
// most PieceSize) instead of mapping it.
func zeroBlocksRead(f *os.File, start, end, blk int64, fn func(off int64, zero bool) error) error {
	buf := getPiece()
	defer putPiece(buf)
	if end-start > int64(len(buf.b)) {
		return fmt.Errorf("reading %s at %d: %d bytes at once, more than a piece", f.Name(), start, end-start)
	}
	b := buf.b[:end-start]
	if got, err := f.ReadAt(b, start); int64(got) < end-start {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("file ended before %d bytes (changed while reading?)", end)
		}
		return fmt.Errorf("reading %s at %d: %w", f.Name(), start, err)
	}
	for off := int64(0); off < int64(len(b)); off += blk {
		c := b[off:min(int64(len(b)), off+blk)]
		if err := fn(start+off, bytes.Equal(c, zeros()[:len(c)])); err != nil {
			return err
		}
	}
	return nil
}
