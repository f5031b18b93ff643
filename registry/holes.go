package registry

import (
	"context"
	"fmt"
	"os"

	"orkpipe/artifacts/sparse"
)

// clearHoles makes every byte of data (a partial file of size bytes left by an earlier pull)
// outside exts, the file's data extents, read as zeros: a pull writes only data extents and hashes
// holes as zeros without reading them, so whatever is on disk there must be zeros. Data the
// filesystem holds inside a hole (SEEK_DATA/SEEK_HOLE, one merge walk with exts) is punched out
// (fallocate PUNCH_HOLE); a filesystem that cannot punch holes gets the whole file emptied
// (truncated to 0 and back to size), so that every journaled range fails its re-verification and is
// fetched again. Holes already holes cost nothing.
func clearHoles(ctx context.Context, data *os.File, size int64, exts []Extent) error {
	disk, err := sparse.DataExtents(data, size)
	if err != nil {
		return err
	}
	i := 0
	for _, d := range disk {
		for pos := d.Off; pos < d.End(); {
			if err := ctx.Err(); err != nil {
				return err
			}
			for i < len(exts) && exts[i].End() <= pos {
				i++
			}
			if i < len(exts) && exts[i].Off <= pos { // pos is in a data extent: skip it
				pos = exts[i].End()
				continue
			}
			end := d.End()
			if i < len(exts) {
				end = min(end, exts[i].Off)
			}
			if err := punchHole(data, pos, end-pos); err != nil {
				if err := data.Truncate(0); err != nil {
					return fmt.Errorf("%s: clear stale bytes in its holes: %w", data.Name(), err)
				}
				if err := data.Truncate(size); err != nil {
					return fmt.Errorf("%s: clear stale bytes in its holes: %w", data.Name(), err)
				}
				return nil
			}
			pos = end
		}
	}
	return nil
}
