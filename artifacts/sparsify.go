package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// digHoles turns every holeSpan-aligned all-zero span of f's data into a hole (fallocate
// PUNCH_HOLE, size kept), as `cp --sparse=always` or `fallocate --dig-holes` would: the logical
// bytes do not change, only how much disk they occupy. It returns the bytes punched. Spans already
// in holes are not read; of a data span the first probeSize bytes are read first, and the rest
// only if they are all zero, so dense data costs one small pread per span. A filesystem that
// cannot punch holes leaves f as it is (0, nil). f must be open for writing and must not change
// meanwhile.
func digHoles(ctx context.Context, f *os.File, size int64) (int64, error) {
	var punched int64
	var runStart, runEnd int64 = -1, -1 // the pending run of zero spans
	flush := func() error {
		if runStart < 0 {
			return nil
		}
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, runStart, runEnd-runStart)
		if err != nil {
			return err
		}
		punched += runEnd - runStart
		runStart, runEnd = -1, -1
		return nil
	}
	var pos int64 // spans before pos were examined
	err := segments(f, size, func(off, n int64) error {
		start := max(pos, off-off%holeSpan)
		end := min(size, (off+n+holeSpan-1)/holeSpan*holeSpan)
		for piece := start; piece < end; piece += PieceSize {
			if err := ctx.Err(); err != nil {
				return err
			}
			pend := min(end, piece+PieceSize)
			zero, err := zeroSpans(f, piece, pend)
			if err != nil {
				return err
			}
			for i, z := range zero {
				s := piece + int64(i)*holeSpan
				switch {
				case !z:
					if err := flush(); err != nil {
						return err
					}
				case s == runEnd:
					runEnd = min(s+holeSpan, size)
				default:
					if err := flush(); err != nil {
						return err
					}
					runStart, runEnd = s, min(s+holeSpan, size)
				}
			}
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

// probeSize is how much of a span is read first: data almost always has a non-zero byte there,
// so a data span costs one small pread; only a span whose probe is all zero is read whole.
const probeSize = 512

// zeroSpans reports, per holeSpan span of [start, end) of f (start holeSpan-aligned), whether it
// is all zero. A short read (the file shrank meanwhile) is an error.
func zeroSpans(f *os.File, start, end int64) ([]bool, error) {
	buf := blockPool.Get().(*[]byte)
	defer blockPool.Put(buf)
	var zero []bool
	for off := start; off < end; off += holeSpan {
		n := min(holeSpan, end-off)
		probe := min(probeSize, n)
		z, err := readZero(f, (*buf)[:probe], off)
		if err == nil && z && n > probe {
			z, err = readZero(f, (*buf)[:n-probe], off+probe)
		}
		if err != nil {
			return nil, err
		}
		zero = append(zero, z)
	}
	return zero, nil
}

// readZero reads len(b) bytes of f at off into b and reports whether they are all zero.
func readZero(f *os.File, b []byte, off int64) (bool, error) {
	if got, err := f.ReadAt(b, off); got < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("file ended at %d (changed while reading?)", off+int64(got))
		}
		return false, fmt.Errorf("reading %s at %d: %w", f.Name(), off, err)
	}
	return bytes.Equal(b, zeroBlock[:len(b)]), nil
}
