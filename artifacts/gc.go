package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"orkpipe/internal/flock"
)

// pinRecord is pins/<blake3(name)>.json: the outputs of the most recent build of a target name,
// and when they were first pinned (a rebuild pinning the same objects leaves the record alone).
type pinRecord struct {
	Name    string    `json:"name"`
	Objects []Digest  `json:"objects"`
	Time    time.Time `json:"time"`
}

// Pin records objs as the outputs of the most recent build of the target name, replacing the
// previous pin of that name (whose objects become collectable). GC never removes pinned objects.
// Every object must be stored. A pin that already names exactly objs under name is left as it is
// (a no-op rebuild writes and fsyncs nothing here).
func (s *Store) Pin(ctx context.Context, name string, objs []Digest) error {
	if err := s.writable(fmt.Sprintf("pin %q", name)); err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return fmt.Errorf("pin: %w: %w", ErrInvalidRecord, err)
	}
	for _, d := range objs {
		if _, err := s.Stat(ctx, d); err != nil {
			return fmt.Errorf("pin %q: %w", name, err)
		}
	}
	path := filepath.Join(s.dir, "pins", SumBytes([]byte(name)).Hex()+".json")
	if b, err := readLimited(path, maxRecordSize); err == nil {
		var old pinRecord
		if json.Unmarshal(b, &old) == nil && old.Name == name && slices.Equal(old.Objects, objs) {
			return nil
		}
	}
	b, err := json.MarshalIndent(pinRecord{Name: name, Objects: append([]Digest{}, objs...), Time: time.Now().UTC()}, "", "  ")
	if err != nil {
		return fmt.Errorf("pin %q: %w", name, err)
	}
	if err := s.writeRecord(path, b); err != nil {
		return fmt.Errorf("pin %q: %w", name, err)
	}
	return nil
}

// pinned returns the set of pinned digests. An unreadable pin file is an error: GC must not guess.
func (s *Store) pinned() (map[Digest]bool, error) {
	dir := filepath.Join(s.dir, "pins")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading pins: %w", err)
	}
	set := map[Digest]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := readLimited(p, maxRecordSize)
		if err != nil {
			return nil, fmt.Errorf("reading pin %s: %w", p, err)
		}
		var r pinRecord
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("pin %s: %w: %w", p, ErrInvalidRecord, err)
		}
		for _, d := range r.Objects {
			set[d] = true
		}
	}
	return set, nil
}

// GCOptions bounds the store. At least one of them must be set.
type GCOptions struct {
	MaxSize int64         // remove least recently used unpinned objects until the objects total at most this (0: no bound)
	MaxAge  time.Duration // remove unpinned objects not used for longer than this (0: no bound)
	// Outdated, when set, says which action records the caller can no longer hit (a stage it does not
	// run, or another version of it: Outdated(stage, version)). GC drops those records and removes,
	// whatever their size or age, the unpinned objects that only such records name.
	Outdated func(stage string, version int) bool
	// Inputs, when set with Outdated, says which objects the node of an action record read: the input
	// digests of the key material whose key is key (ok false where the caller does not know them).
	// GC then also drops the records downstream of outdated ones, as outdated: a record whose node
	// read an object that only outdated records name is not hit again (its key names that object)
	// unless the caller's version of the stage that made it makes the same bytes again, and so on
	// down the graph. Run after the caller's rebuild, that keeps every record the rebuild used (it named
	// their inputs again); run before, it can drop records a rebuild would have hit where a new stage
	// version makes the same bytes (their nodes then run again). A record whose inputs are unknown is
	// kept.
	Inputs func(key Digest) (inputs []Digest, ok bool)
}

// GCReport says what GC found and did.
type GCReport struct {
	Objects        int   `json:"objects"`         // objects before
	Bytes          int64 `json:"bytes"`           // their size
	Removed        int   `json:"removed"`         // objects removed
	Freed          int64 `json:"freed"`           // their size
	Pinned         int   `json:"pinned"`          // pinned objects (kept)
	PinnedBytes    int64 `json:"pinned_bytes"`    // their size
	ActionsRemoved int   `json:"actions_removed"` // action records whose outputs are gone
	Outdated       int   `json:"outdated"`        // action records GCOptions.Outdated named, dropped
	Downstream     int   `json:"downstream"`      // of those, the ones GCOptions.Inputs found downstream of the others
	EntriesRemoved int   `json:"entries_removed"` // stat-cache and journal entries of paths that no longer exist
	Sessions       int   `json:"sessions"`        // temp sessions of dead processes removed
	Locks          int   `json:"locks"`           // per-key lock files removed (locks/)
	TempFiles      int   `json:"temp_files"`      // temp files killed writers left outside the sessions
	OverBudget     bool  `json:"over_budget"`     // pinned objects alone exceed MaxSize
}

// GC removes unpinned objects: those only outdated action records name (with Outdated), those
// unused for longer than MaxAge, then the least recently used until the store holds at most MaxSize
// bytes of objects. Use times are the access markers (see the package doc), not atime. Action records
// that reference a removed object are deleted (they would be misses anyway), and with Outdated the
// outdated records too. It also removes the temp sessions of dead processes, the per-key lock files
// (no other process can hold one while GC has the store) and the temp files killed writers left in
// the store outside a session (pruneStaleTemps). GC needs the store to itself: if another Store is
// open on the directory it fails with ErrBusy and removes nothing.
func (s *Store) GC(ctx context.Context, opts GCOptions) (GCReport, error) {
	var rep GCReport
	if err := s.writable("gc"); err != nil {
		return rep, err
	}
	if opts.MaxSize < 0 || opts.MaxAge < 0 || opts.MaxSize == 0 && opts.MaxAge == 0 && opts.Outdated == nil {
		return rep, fmt.Errorf("gc: need a positive MaxSize or MaxAge, or Outdated (got %d bytes, %s)", opts.MaxSize, opts.MaxAge)
	}
	if err := flock.Lock(s.storeLock, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		// A failed conversion drops the shared lock: take it back.
		if serr := flock.Lock(s.storeLock, unix.LOCK_SH); serr != nil {
			return rep, fmt.Errorf("gc: re-taking the shared store lock: %w", serr)
		}
		return rep, fmt.Errorf("gc %s: %w: another orkpipe process has the store open; retry when it is done", s.dir, ErrBusy)
	}
	defer flock.Lock(s.storeLock, unix.LOCK_SH)

	var err error
	rep.Sessions = s.cleanSessions()
	if rep.Locks, err = s.pruneLocks(ctx); err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	if rep.TempFiles, err = s.pruneStaleTemps(ctx); err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	pins, err := s.pinned()
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	objs, _, err := s.listObjects(ctx)
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	var stale staleRecords
	if opts.Outdated != nil {
		if stale, err = s.outdatedRecords(ctx, "gc", true, opts.Outdated, opts.Inputs); err != nil {
			return rep, fmt.Errorf("gc: %w", err)
		}
	}
	type cand struct {
		objectEntry
		used time.Time
	}
	var cands []cand
	for _, o := range objs {
		rep.Objects++
		rep.Bytes += o.Size
		if pins[o.Digest] {
			rep.Pinned++
			rep.PinnedBytes += o.Size
			continue
		}
		cands = append(cands, cand{o, s.lastUse(o)})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].used.Before(cands[j].used) })
	removed := map[Digest]bool{}
	total := rep.Bytes
	now := time.Now()
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		old := opts.MaxAge > 0 && now.Sub(c.used) > opts.MaxAge
		big := opts.MaxSize > 0 && total > opts.MaxSize
		if !old && !big && !stale.only[c.Digest] {
			continue
		}
		if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rep, fmt.Errorf("gc: removing %s: %w", c.path, err)
		}
		os.Remove(s.accessPath(c.Digest))
		os.Remove(s.digestsPath(c.Digest))
		removed[c.Digest] = true
		rep.Removed++
		rep.Freed += c.Size
		total -= c.Size
	}
	rep.OverBudget = opts.MaxSize > 0 && total > opts.MaxSize
	for _, p := range stale.paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rep, fmt.Errorf("gc: removing an outdated action record: %w", err)
		}
		rep.Outdated++
	}
	rep.Downstream = stale.downstream
	if rep.ActionsRemoved, err = s.dropActions(ctx, removed); err != nil {
		return rep, err
	}
	rep.EntriesRemoved, err = s.pruneEntries(ctx)
	if err != nil {
		return rep, err
	}
	return rep, s.pruneDigests(ctx)
}

// pruneDigests removes the digests records of objects that are gone (GC removes an object's record
// with it; a process killed in between leaves one behind). A record is named by its object's
// content, so a left-over one is never wrong, only useless.
func (s *Store) pruneDigests(ctx context.Context) error {
	err := filepath.WalkDir(filepath.Join(s.dir, "digests"), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		d, perr := ParseHex(e.Name())
		if perr != nil {
			return nil // not ours to judge
		}
		if _, err := os.Lstat(s.objectPath(d)); errors.Is(err, fs.ErrNotExist) {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("gc: pruning digests records: %w", err)
	}
	return nil
}

// pruneEntries removes stat-cache and journal entries whose user path no longer exists.
func (s *Store) pruneEntries(ctx context.Context) (int, error) {
	n := 0
	for _, kind := range []string{"stat", "journal"} {
		err := filepath.WalkDir(filepath.Join(s.dir, kind), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			b, err := readLimited(p, 1<<16)
			if err != nil {
				return err
			}
			var entry struct {
				Path string `json:"path"`
			}
			if json.Unmarshal(b, &entry) != nil || entry.Path == "" {
				return nil // not ours to judge; lookups treat it as a miss
			}
			if _, err := os.Lstat(entry.Path); errors.Is(err, fs.ErrNotExist) {
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("gc: pruning %s entries: %w", kind, err)
		}
	}
	return n, nil
}

// lastUse is the later of the object's access marker mtime and its own mtime (ingest time).
func (s *Store) lastUse(o objectEntry) time.Time {
	var t time.Time
	if fi, err := os.Stat(o.path); err == nil {
		t = fi.ModTime()
	}
	if fi, err := os.Stat(s.accessPath(o.Digest)); err == nil && fi.ModTime().After(t) {
		t = fi.ModTime()
	}
	return t
}

// dropActions deletes the action records that reference a removed object.
func (s *Store) dropActions(ctx context.Context, removed map[Digest]bool) (int, error) {
	if len(removed) == 0 {
		return 0, nil
	}
	n := 0
	err := s.walkActions(ctx, "gc", true, func(p string, rec ActionRecord) error {
		for _, o := range rec.Outputs {
			if removed[o.Digest] {
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				n++
				break
			}
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("gc: pruning action records: %w", err)
	}
	return n, nil
}

// staleRecords are the action records an outdated predicate names, or that lie downstream of those
// (paths; downstream counts the latter), and the objects only they name as outputs (only).
type staleRecords struct {
	paths      []string
	downstream int
	only       map[Digest]bool
}

// outdatedRecords walks the action records and sorts them by outdated(stage, version): the outdated
// ones' paths, and the objects that outdated records name and no other record does. With inputs, a
// record that read such an object is outdated too, until no more records are (each pass marks
// what read the last one's objects; a graph's depth is a few passes).
func (s *Store) outdatedRecords(ctx context.Context, what string, drop bool, outdated func(stage string, version int) bool, inputs func(Digest) ([]Digest, bool)) (staleRecords, error) {
	type record struct {
		path  string
		key   Digest
		outs  []Digest
		stale bool
	}
	var recs []record
	err := s.walkActions(ctx, what, drop, func(p string, rec ActionRecord) error {
		r := record{path: p, key: rec.Key, stale: outdated(rec.Stage, rec.Version)}
		for _, o := range rec.Outputs {
			r.outs = append(r.outs, o.Digest)
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return staleRecords{}, fmt.Errorf("reading action records: %w", err)
	}
	st := staleRecords{}
	for {
		st.only = map[Digest]bool{}
		live := map[Digest]bool{}
		for _, r := range recs {
			for _, d := range r.outs {
				if r.stale {
					st.only[d] = true
				} else {
					live[d] = true
				}
			}
		}
		for d := range live {
			delete(st.only, d)
		}
		if inputs == nil || len(st.only) == 0 {
			break
		}
		more := false
		for i := range recs {
			if recs[i].stale {
				continue
			}
			if ins, ok := inputs(recs[i].key); ok && slices.ContainsFunc(ins, func(d Digest) bool { return st.only[d] }) {
				recs[i].stale, more = true, true
				st.downstream++
			}
		}
		if !more {
			break
		}
		if err := ctx.Err(); err != nil {
			return staleRecords{}, err
		}
	}
	for _, r := range recs {
		if r.stale {
			st.paths = append(st.paths, r.path)
		}
	}
	return st, nil
}

// walkActions calls fn with the path and the record of every valid action record. An invalid one
// (see GetAction) is skipped: with drop (GC, which has the store to itself) it is quarantined as
// GetAction quarantines it; else it is logged (as what's) and left in place.
func (s *Store) walkActions(ctx context.Context, what string, drop bool, fn func(path string, rec ActionRecord) error) error {
	return filepath.WalkDir(filepath.Join(s.dir, "actions"), func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() || !strings.HasSuffix(p, ".json") {
			return ctx.Err()
		}
		key, _ := ParseHex(strings.TrimSuffix(e.Name(), ".json")) // zero for a foreign name: no key check
		rec, ino, err := readAction(p, key)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed meanwhile
		}
		if errors.Is(err, ErrInvalidRecord) {
			if drop && !key.IsZero() {
				s.invalidAction(key, p, ino, err)
			} else {
				s.log.Warn(what+": invalid action record left in place", "path", p, "err", err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		return fn(p, rec)
	})
}
