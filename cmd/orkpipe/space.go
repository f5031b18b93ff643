package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"orkpipe/artifacts"
	"orkpipe/internal/units"
	"orkpipe/pipelines/engine"
)

// planSpace is what the nodes of a plan that are not cached would write into the cache (the sum of
// their declared output sizes, engine.Node.Writes), with the outputs of the nodes cached only in the
// remote cache, which the build downloads there, against the room the cache's filesystem has, and,
// when the results' directory is on another filesystem (where they are copies, not hard links), what
// copying them there writes against the room that filesystem has.
type planSpace struct {
	dir    string // the cache directory
	run    int    // nodes not cached
	remote int    // nodes cached only in the remote cache
	fetch  int64  // the recorded output bytes of those, which the build downloads
	writes int64  // the declared writes of the nodes not cached, and fetch
	free   int64  // bytes available to this user on dir's filesystem; -1 unknown

	out      string // the results' directory when it is on another filesystem than the cache, else ""
	outBytes int64  // what copying the results not already in place there writes
	outFree  int64  // bytes available on out's filesystem

	// When the cache is short and its usage could be read: what gc --outdated and gc --max-size
	// would free there (cache du's figures).
	usage                      bool
	freeOutdated, freeUnpinned int64
}

// spaceOf sums the declared writes of the nodes not cached and measures the cache's free space (a
// filesystem that cannot be asked is logged, and the free space is unknown). With outDir (build's
// -o; "" for plan) on another filesystem than the cache, it also sums what materializing the exports
// copies there: a cached export's allocated blocks (the copy is sparse) unless the copy already in
// place is that object (artifacts.Store.InPlace), a node not cached by its declared writes. When the
// cache is short it reads what gc could free there (artifacts.Store.Usage), for the refusal to say.
func spaceOf(ctx context.Context, opts *globalOptions, store *artifacts.Store, nodes []engine.NodeStatus, outDir string) planSpace {
	s := planSpace{free: -1}
	for _, n := range nodes {
		switch {
		case !n.Cached:
			s.run++
			s.writes += n.Writes
		case n.Remote:
			s.remote++
			s.fetch += n.RemoteBytes
			s.writes += n.RemoteBytes
		}
	}
	dir, err := opts.cache()
	if err != nil {
		return s
	}
	s.dir = dir
	cfs, err := fsSpace(dir)
	if err != nil {
		opts.logger.Warn("the cache's free space is unknown", "dir", dir, "err", err)
		return s
	}
	s.free = cfs.free
	if s.short() && store != nil {
		if inputs, err := recordedInputs(ctx, opts); err != nil {
			opts.logger.Warn("what gc --outdated could free is unknown", "err", err)
		} else if rep, err := store.Usage(ctx, outdatedRecord, inputs); err == nil {
			s.usage, s.freeOutdated, s.freeUnpinned = true, rep.OutdatedDisk, rep.Disk-rep.PinnedDisk
		}
	}
	if !s.outputFS(opts, cfs, outDir) {
		return s
	}
	for _, n := range nodes {
		if !n.Cached {
			if len(n.Exports) > 0 {
				s.outBytes += n.Writes
			}
			continue
		}
		for name, output := range n.Exports {
			f, ok := n.Files[output]
			if !ok || (store != nil && store.InPlace(ctx, f.Digest, filepath.Join(s.out, name))) {
				continue
			}
			s.outBytes += allocatedBytes(f.Path, f.Size)
		}
	}
	return s
}

// outputFS sets s.out and s.outFree when outDir is on another filesystem than the cache's (cfs), and
// reports whether it is; a filesystem that cannot be asked is logged, and counts as the cache's.
func (s *planSpace) outputFS(opts *globalOptions, cfs fsInfo, outDir string) bool {
	if outDir == "" {
		return false
	}
	abs, err := filepath.Abs(outDir)
	if err != nil {
		return false
	}
	ofs, err := fsSpace(abs)
	if err != nil {
		opts.logger.Warn("the output directory's free space is unknown", "dir", abs, "err", err)
		return false
	}
	if ofs.dev == cfs.dev {
		return false // hard links
	}
	s.out, s.outFree = abs, ofs.free
	return true
}

// exportSpace is the output half of spaceOf for a build whose exports are all known (one served from
// its memo, which plans nothing): what copying the exports not already in place into outDir writes,
// when outDir is on another filesystem than the cache's, against the room there.
func exportSpace(ctx context.Context, opts *globalOptions, store *artifacts.Store, exports map[string]artifacts.Object, outDir string) planSpace {
	s := planSpace{free: -1}
	dir, err := opts.cache()
	if err != nil {
		return s
	}
	cfs, err := fsSpace(dir)
	if err != nil || !s.outputFS(opts, cfs, outDir) {
		return s
	}
	for name, o := range exports {
		if store.InPlace(ctx, o.Digest, filepath.Join(s.out, name)) {
			continue
		}
		path, err := store.Path(ctx, o.Digest)
		if err != nil {
			path = "" // allocatedBytes then counts the size
		}
		s.outBytes += allocatedBytes(path, o.Size)
	}
	return s
}

// allocatedBytes is the space a sparse copy of the file at path takes (its allocated blocks), or
// size when that cannot be known.
func allocatedBytes(path string, size int64) int64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return size
	}
	return min(int64(st.Blocks)*512, size+int64(st.Blksize))
}

// short reports whether the cache has less room than the nodes not cached would write.
func (s planSpace) short() bool { return s.free >= 0 && s.writes > s.free }

// outShort reports whether the results' directory, on another filesystem, has less room than their
// copies need.
func (s planSpace) outShort() bool { return s.out != "" && s.outBytes > s.outFree }

// check is build's refusal to start a build that would run out of space in the cache or, on another
// filesystem, where its results are copied.
func (s planSpace) check(target string) error {
	var errs []error
	if s.short() {
		errs = append(errs, fmt.Errorf("build %s: %s write about %s into the cache %s, whose filesystem has %s free: "+
			"free space there (orkpipe cache du shows what the cache holds; %s), "+
			"point --cache at a larger disk (the build starts over in an empty cache), or pass --no-space-check",
			target, s.what(true), units.FormatSize(s.writes), s.dir, units.FormatSize(s.free), s.gcHint()))
	}
	if s.outShort() {
		errs = append(errs, fmt.Errorf("build %s: copying the results into %s (another filesystem than the cache's, so copies, not hard links) "+
			"writes about %s, and that filesystem has %s free: free space there, choose -o on the cache's filesystem, or pass --no-space-check",
			target, s.out, units.FormatSize(s.outBytes), units.FormatSize(s.outFree)))
	}
	return errors.Join(errs...)
}

// gcHint says what cache gc can free in the cache: the figures when they are known, else the
// commands.
func (s planSpace) gcHint() string {
	if !s.usage {
		return "cache gc --outdated removes what only other orkpipe versions' nodes made, cache gc --max-size SIZE what no target's latest build pins"
	}
	var hints []string
	if s.freeOutdated > 0 {
		hints = append(hints, fmt.Sprintf("cache gc --outdated frees %s that only other orkpipe versions' nodes made", units.FormatSize(s.freeOutdated)))
	}
	if s.freeUnpinned > 0 {
		hints = append(hints, fmt.Sprintf("cache gc --max-size SIZE up to %s that no target's latest build pins", units.FormatSize(s.freeUnpinned)))
	}
	if len(hints) == 0 {
		return "the cache holds nothing gc can free"
	}
	return strings.Join(hints, ", ")
}

// checkSpace refuses to start the build of plan when the nodes not cached would write more into the
// cache than its filesystem has free (planSpace.check): a 27B build writes about a hundred GiB of
// Hessians, finalized and tiled weights and hidden states, and one that runs out of space hours in
// fails there. It costs what plan's status does (the sources hashed through the stat cache, which the
// build then reads back).
func checkSpace(ctx context.Context, opts *globalOptions, s *engineSession, plan *engine.Plan, target, outDir string) error {
	nodes, err := s.engine.Status(ctx, plan)
	if err != nil {
		return err
	}
	return spaceOf(ctx, opts, s.store, nodes, outDir).check(target)
}

// setJSON sets out's space fields.
func (s planSpace) setJSON(out *planOutput) {
	out.WritesBytes = s.writes
	if s.free >= 0 {
		free := s.free
		out.CacheFreeBytes = &free
	}
	if s.out != "" {
		out.OutputDir, out.OutputWritesBytes = s.out, s.outBytes
		free := s.outFree
		out.OutputFreeBytes = &free
	}
}

// what names what writes into the cache: the nodes not cached (with their count when counted), the
// downloads from the remote cache.
func (s planSpace) what(counted bool) string {
	var parts []string
	switch {
	case s.run > 0 && counted:
		parts = append(parts, fmt.Sprintf("the %d nodes not cached", s.run))
	case s.run > 0:
		parts = append(parts, "the nodes not cached")
	}
	if s.remote > 0 {
		parts = append(parts, fmt.Sprintf("the downloads of the %d nodes in the remote cache (%s)", s.remote, units.FormatSize(s.fetch)))
	}
	return strings.Join(parts, " and ")
}

// write prints the space line after the plan's table: nothing when every node is cached locally.
func (s planSpace) write(w io.Writer) {
	switch {
	case s.run == 0 && s.remote == 0:
	case s.free < 0:
		fmt.Fprintf(w, "cache: %s write about %s\n", s.what(false), units.FormatSize(s.writes))
	case s.short():
		fmt.Fprintf(w, "cache: %s write about %s, more than the %s free in %s: the build would stop for lack of space (%s)\n",
			s.what(false), units.FormatSize(s.writes), units.FormatSize(s.free), s.dir, s.gcHint())
	default:
		fmt.Fprintf(w, "cache: %s write about %s (%s free in %s)\n", s.what(false), units.FormatSize(s.writes), units.FormatSize(s.free), s.dir)
	}
	switch {
	case s.out == "" || s.outBytes == 0:
	case s.outShort():
		fmt.Fprintf(w, "output: copying the results into %s (another filesystem than the cache's) writes about %s, more than the %s free there: the build would stop for lack of space\n",
			s.out, units.FormatSize(s.outBytes), units.FormatSize(s.outFree))
	default:
		fmt.Fprintf(w, "output: copying the results into %s (another filesystem than the cache's) writes about %s (%s free there)\n",
			s.out, units.FormatSize(s.outBytes), units.FormatSize(s.outFree))
	}
}

// fsInfo is what fsSpace says of a filesystem: the bytes available to this user, and its device.
type fsInfo struct {
	free int64
	dev  uint64
}

// fsSpace measures the filesystem of a directory: statFS (a test makes a disk full, or another
// filesystem, with it).
var fsSpace = statFS

// statFS measures the filesystem that holds dir, or would hold it: a directory not made yet is
// measured at its nearest existing parent.
func statFS(dir string) (fsInfo, error) {
	for {
		var st unix.Statfs_t
		err := unix.Statfs(dir, &st)
		if err == nil {
			var fst unix.Stat_t
			if err = unix.Stat(dir, &fst); err == nil {
				return fsInfo{free: availBytes(&st), dev: uint64(fst.Dev)}, nil
			}
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, fs.ErrNotExist) || parent == dir {
			return fsInfo{}, &os.PathError{Op: "statfs", Path: dir, Err: err}
		}
		dir = parent
	}
}
