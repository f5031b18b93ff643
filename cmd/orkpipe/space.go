package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"orkpipe/internal/units"
	"orkpipe/pipelines/engine"
)

// planSpace is what the nodes of a plan that are not cached would write into the cache (the sum of
// their declared output sizes, engine.Node.Writes) against the room the cache's filesystem has.
type planSpace struct {
	dir    string // the cache directory
	run    int    // nodes not cached
	writes int64
	free   int64 // bytes available to this user on dir's filesystem; -1 unknown
}

// spaceOf sums the declared writes of the nodes not cached and measures the cache's free space (a
// filesystem that cannot be asked is logged, and the free space is unknown).
func spaceOf(opts *globalOptions, nodes []engine.NodeStatus) planSpace {
	s := planSpace{free: -1}
	for _, n := range nodes {
		if !n.Cached {
			s.run++
			s.writes += n.Writes
		}
	}
	dir, err := opts.cache()
	if err != nil {
		return s
	}
	s.dir = dir
	if s.free, err = cacheFreeBytes(dir); err != nil {
		opts.logger.Warn("the cache's free space is unknown", "dir", dir, "err", err)
		s.free = -1
	}
	return s
}

// short reports whether the cache has less room than the nodes not cached would write.
func (s planSpace) short() bool { return s.free >= 0 && s.writes > s.free }

// check is build's refusal to start a build that would run out of space in the cache.
func (s planSpace) check(target string) error {
	if !s.short() {
		return nil
	}
	return fmt.Errorf("build %s: the %d nodes not cached write about %s into the cache %s, whose filesystem has %s free: "+
		"free space there (orkpipe cache du shows what the cache holds; cache gc --max-size SIZE removes what no target's latest build pins), "+
		"point --cache at a larger disk (the build starts over in an empty cache), or pass --no-space-check",
		target, s.run, units.FormatSize(s.writes), s.dir, units.FormatSize(s.free))
}

// checkSpace refuses to start the build of plan when the nodes not cached would write more into the
// cache than its filesystem has free (planSpace.check): a 27B build writes about a hundred GiB of
// Hessians, finalized and tiled weights and hidden states, and one that runs out of space hours in
// fails there. It costs what plan's status does (the sources hashed through the stat cache, which the
// build then reads back).
func checkSpace(ctx context.Context, opts *globalOptions, eng *engine.Engine, plan *engine.Plan, target string) error {
	nodes, err := eng.Status(ctx, plan)
	if err != nil {
		return err
	}
	return spaceOf(opts, nodes).check(target)
}

// setJSON sets out's space fields.
func (s planSpace) setJSON(out *planOutput) {
	out.WritesBytes = s.writes
	if s.free >= 0 {
		free := s.free
		out.CacheFreeBytes = &free
	}
}

// write prints the space line after the plan's table: nothing when every node is cached.
func (s planSpace) write(w io.Writer) {
	switch {
	case s.run == 0:
	case s.free < 0:
		fmt.Fprintf(w, "cache: the nodes not cached write about %s\n", units.FormatSize(s.writes))
	case s.short():
		fmt.Fprintf(w, "cache: the nodes not cached write about %s, more than the %s free in %s: the build would stop for lack of space\n",
			units.FormatSize(s.writes), units.FormatSize(s.free), s.dir)
	default:
		fmt.Fprintf(w, "cache: the nodes not cached write about %s (%s free in %s)\n", units.FormatSize(s.writes), units.FormatSize(s.free), s.dir)
	}
}

// cacheFreeBytes measures the cache's free space: freeBytes (a test makes the disk full with it).
var cacheFreeBytes = freeBytes

// freeBytes is the space available to this user on the filesystem that holds dir, or would hold it:
// a directory not made yet is measured at its nearest existing parent.
func freeBytes(dir string) (int64, error) {
	for {
		var st unix.Statfs_t
		err := unix.Statfs(dir, &st)
		if err == nil {
			return int64(st.Bavail) * int64(st.Bsize), nil
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, fs.ErrNotExist) || parent == dir {
			return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
		}
		dir = parent
	}
}
