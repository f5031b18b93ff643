package registry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"orkpipe/artifacts"
	"orkpipe/internal/flock"
)

// PartialDir is the directory, beside the pulled files, that holds the state of unfinished pulls:
//
//	DIR/.orkpipe-partial/<manifest sha256 hex>/
//	    lock         flock(2)ed by the pull in progress
//	    journal      one line per verified range: "<file>\t<range index>\t<range digest>\n" (the
//	                 range's chaining value, or the file's BLAKE3 for a one-range file), appended
//	                 only after the range's bytes were verified and written
//	    .data/<file> the file being assembled, full length, sparse, written at its data extents
//	                 (in a directory no file can be named like, a file name never starting with a
//	                 dot, so that files named journal or lock are not the state files)
//
// Partial files of the older layout (<file> beside the journal) are moved into .data when the state
// is opened, and resumed like any other (re-verified first).
//
// A resumed pull re-hashes every journaled range from disk before trusting it (a record whose bytes
// no longer match, e.g. lost in a power failure, is dropped and the range downloaded again). That is
// why neither the ranges nor the journal are fsynced as they land; the finished file is, before its
// rename into DIR. The state directory is removed when the whole artifact is in place.
const PartialDir = ".orkpipe-partial"

type partialState struct {
	dir  string
	lock *os.File
	mu   sync.Mutex
	jnl  *os.File
	done map[string]bool // "<file>\t<index>\t<digest>"
}

// lockGrace is how long openPartial waits for a state's lock it finds held before it takes it for
// a running pull's: leftoverStates holds it a moment to tell a live state from a dead one.
const lockGrace = time.Second

// openPartial creates or reopens the state directory of manifest digest hex in dir and locks it;
// it fails when another pull holds the lock (after lockGrace).
func openPartial(dir, manifestHex string) (*partialState, error) {
	p := filepath.Join(dir, PartialDir, manifestHex)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(p, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	// A lock held for a moment only (leftoverStates probing whether this state is live) is waited
	// for; one held longer is a running pull's.
	wait, cancel := context.WithTimeout(context.Background(), lockGrace)
	err = flock.Wait(wait, lock, unix.LOCK_EX, 0, nil)
	cancel()
	if err != nil {
		lock.Close()
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%s: another pull of this artifact into %s is running", p, dir)
		}
		return nil, fmt.Errorf("%s: lock: %w", p, err)
	}
	st := &partialState{dir: p, lock: lock, done: map[string]bool{}}
	if err := st.moveOldData(); err != nil {
		st.close()
		return nil, err
	}
	jpath := filepath.Join(p, journalName)
	if f, err := os.Open(jpath); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, ok := parseJournalLine(sc.Text()); ok {
				st.done[k] = true
			}
		}
		f.Close()
	}
	if st.jnl, err = os.OpenFile(jpath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
		st.close()
		return nil, err
	}
	return st, nil
}

func journalKey(file string, index int, digest string) string {
	return file + "\t" + strconv.Itoa(index) + "\t" + digest
}

// parseJournalLine accepts only well-formed lines; a torn last line (killed mid-write) is ignored.
func parseJournalLine(line string) (string, bool) {
	f := strings.Split(line, "\t")
	if len(f) != 3 || validName(f[0]) != nil || !validRangeDigest(f[2]) {
		return "", false
	}
	i, err := strconv.Atoi(f[1])
	if err != nil || i < 0 || strconv.Itoa(i) != f[1] {
		return "", false
	}
	return line, true
}

// validRangeDigest accepts what rangeDigest writes: 64 hex digits, or "blake3:" and 64.
func validRangeDigest(s string) bool {
	if _, err := artifacts.ParseDigest(s); err == nil {
		return true
	}
	_, err := parseCV(s)
	return err == nil
}

// rangeDigest is the digest a range is verified against, as journaled: its chaining value, or the
// file's BLAKE3 for a one-range file.
func rangeDigest(f File, k int) string {
	if f.RangeSize == 0 {
		return f.Digests.BLAKE3.String()
	}
	return cvHex(f.Ranges[k].CV)
}

// recorded reports whether range k of f was journaled as verified.
func (s *partialState) recorded(f File, k int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[journalKey(f.Name, k, rangeDigest(f, k))]
}

// record journals range k of f as verified (its bytes written to the partial file).
func (s *partialState) record(f File, k int) error {
	key := journalKey(f.Name, k, rangeDigest(f, k))
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.jnl.WriteString(key + "\n"); err != nil {
		return fmt.Errorf("%s: journal: %w", s.dir, err)
	}
	s.done[key] = true
	return nil
}

// Names in a state directory.
const (
	lockName    = "lock"
	journalName = "journal"
	dataDirName = ".data"
)

// dataPath is where file is assembled.
func (s *partialState) dataPath(file string) string { return filepath.Join(s.dir, dataDirName, file) }

// moveOldData creates the data directory and moves into it the partial files an older orkpipe
// assembled beside the journal (any regular file but the lock and the journal).
func (s *partialState) moveOldData() error {
	data := filepath.Join(s.dir, dataDirName)
	if err := os.Mkdir(data, 0o755); errors.Is(err, os.ErrExist) {
		return nil // this layout already
	} else if err != nil {
		return err
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if n := e.Name(); e.Type().IsRegular() && n != lockName && n != journalName && validName(n) == nil {
			if err := os.Rename(filepath.Join(s.dir, n), filepath.Join(data, n)); err != nil {
				return fmt.Errorf("%s: move an older pull's partial file into %s: %w", s.dir, dataDirName, err)
			}
		}
	}
	return nil
}

func (s *partialState) close() {
	if s.jnl != nil {
		s.jnl.Close()
	}
	s.lock.Close()
}

// remove deletes the state directory (after every file is in place).
func (s *partialState) remove() error {
	err := os.RemoveAll(s.dir) // locked still: a finishing pull's state is never taken for a dead one
	s.close()
	if err != nil {
		return err
	}
	os.Remove(filepath.Dir(s.dir)) // only succeeds when no other artifact's state is left
	return nil
}

// LeftoverState is the state directory of another artifact's interrupted pull, found in the
// directory of a pull that finished (PullResult.Leftovers). Pull leaves it: pulling that artifact
// into the directory again resumes from it; removing the directory gives its space back.
type LeftoverState struct {
	Dir    string  // DIR/.orkpipe-partial/<manifest sha256 hex>
	Digest v1.Hash // the manifest digest of the artifact whose pull it holds
	Bytes  int64   // the disk space its files take (allocated blocks: partial files are sparse)
}

// leftoverStates returns the state directories under dir/PartialDir of artifacts other than the
// one of manifest hex current whose pull is not running (stateLive), in name order (entries not
// named like a sha256 digest are not states and are left out). The state of a pull running into
// the same directory is not a leftover: it was reported as one.
func leftoverStates(dir, current string) ([]LeftoverState, error) {
	root := filepath.Join(dir, PartialDir)
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []LeftoverState
	for _, e := range ents {
		if !e.IsDir() || e.Name() == current {
			continue
		}
		h, err := v1.NewHash("sha256:" + e.Name())
		if err != nil {
			continue
		}
		l := LeftoverState{Dir: filepath.Join(root, e.Name()), Digest: h}
		if live, err := stateLive(l.Dir); err != nil {
			return nil, err
		} else if live {
			continue
		}
		err = filepath.WalkDir(l.Dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Lstat(path, &st); err != nil {
				return &fs.PathError{Op: "lstat", Path: path, Err: err}
			}
			l.Bytes += int64(st.Blocks) * 512
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("sizing the interrupted pull state %s: %w", l.Dir, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// stateLive reports whether a pull holds the lock of the state directory sd, i.e. is running (in
// any process: the lock is flock(2)'s, released when its holder dies). It takes the lock shared
// without waiting and releases it at once (openPartial waits lockGrace for a lock it finds held,
// so a pull starting meanwhile is not refused). A state without a lock file, or on a filesystem
// without flock (which cannot tell), is not live.
func stateLive(sd string) (bool, error) {
	p := filepath.Join(sd, lockName)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("interrupted pull state %s: %w", sd, err)
	}
	defer f.Close() // releases the lock when taken
	switch err := flock.Lock(f, unix.LOCK_SH|unix.LOCK_NB); {
	case err == nil, flock.Unsupported(err):
		return false, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	default:
		return false, fmt.Errorf("interrupted pull state %s: flock %s: %w", sd, p, err)
	}
}

// linkAndRemove renames src to dst by a hard link, which fails if dst exists, and removing src.
func linkAndRemove(src, dst string) error {
	if err := os.Link(src, dst); err != nil {
		return err
	}
	return os.Remove(src)
}
