package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// errNoExchange: the filesystem (or the system) cannot swap two names atomically (exchange).
var errNoExchange = errors.New("no atomic exchange of names here")

// placeAttempts bounds how often put looks again at a destination that keeps changing under it.
const placeAttempts = 8

// placing is one Materialize putting its file at the destination.
type placing struct {
	d     Digest
	obj   Object
	abs   string // the destination
	tmp   string // this Materialize's file, .orkpipe-<16 hex>.tmp
	jpath string // abs's journal entry
	src   unix.Stat_t
	ours  unix.Stat_t // the file at tmp: the object itself (a hard link) or this Materialize's copy
	force bool
	res   *MaterializeResult
}

// isOurs reports whether st is this Materialize's file or the object itself.
func (p *placing) isOurs(st *unix.Stat_t) bool {
	return st.Dev == p.ours.Dev && st.Ino == p.ours.Ino || st.Dev == p.src.Dev && st.Ino == p.src.Ino
}

// put puts this Materialize's file (p.tmp) at p.abs, where checked (nil: none) is the file that
// Materialize found there and may replace (clobberCheck let it go, or Force). It returns the stat of
// the file that holds the object at p.abs: its own, or one that was already there and is kept.
//
// Nothing that reaches p.abs meanwhile (another build writing the same outputs, the user) is lost:
// where p.abs is free the file is linked there, which never replaces a file; a file is replaced by
// swapping names (swapIn), after which what came out is checked. A file at p.abs other than checked
// — it appeared, was replaced or changed after Materialize looked, which a copy of many GiB leaves
// time for — is judged anew: kept when it is the object or holds its bytes, replaced when
// clobberCheck lets it go or with Force (p.res.Replaced then says what), else it stays and the
// error wraps ErrClobber.
func (s *Store) put(ctx context.Context, p *placing, checked *unix.Stat_t) (unix.Stat_t, error) {
	for range placeAttempts {
		var cur unix.Stat_t
		err := unix.Lstat(p.abs, &cur)
		if errors.Is(err, unix.ENOENT) {
			err = os.Link(p.tmp, p.abs)
			if errors.Is(err, fs.ErrExist) {
				checked = nil // it appeared: look at it
				continue
			}
			return p.ours, err
		}
		if err != nil {
			return cur, err
		}
		if checked == nil || idOf(&cur) != idOf(checked) {
			same, why, err := s.clobberCheck(ctx, p.jpath, p.abs, p.abs, &cur, p.obj)
			switch {
			case err != nil:
				return cur, err
			case same || p.isOurs(&cur):
				p.res.Linked = cur.Dev == p.src.Dev && cur.Ino == p.src.Ino
				return cur, nil
			case why != "" && !p.force:
				what := "appeared"
				if checked != nil {
					what = "was replaced or changed"
				}
				return cur, fmt.Errorf("%w %s: it %s while materializing: %s", ErrClobber, p.abs, what, why)
			case why != "":
				p.res.Replaced = fmt.Sprintf("%s: %s", p.abs, why)
			}
			checked = &cur
		}
		moved, err := s.swapIn(ctx, p, checked)
		if err != nil || moved {
			return p.ours, err
		}
		checked = nil // the swap met another file, now back at p.abs: look at it
	}
	return p.ours, fmt.Errorf("the path kept changing while materializing (%d attempts); nothing was replaced", placeAttempts)
}

// swapIn replaces checked, the file at p.abs, by this Materialize's file: it gives that file a second
// name (.orkpipe-<16 hex>.old), swaps that name with p.abs in one step (exchange), and looks at what
// came out. When that is checked (or the object, or a file clobberCheck lets go, or Force), it is
// removed and moved is true. Otherwise a file arrived at p.abs between put's look and the swap: it
// is swapped back, untouched, and put looks at it again (moved false).
//
// A filesystem without the atomic swap (errNoExchange) gets a rename over p.abs: put looked at
// checked just before, so only a file that arrives in that instant could be replaced.
func (s *Store) swapIn(ctx context.Context, p *placing, checked *unix.Stat_t) (moved bool, err error) {
	if checked.Mode&unix.S_IFMT == unix.S_IFDIR {
		return false, &fs.PathError{Op: "replace", Path: p.abs, Err: unix.EISDIR}
	}
	aside := strings.TrimSuffix(p.tmp, tempSuffix) + oldSuffix
	if err := os.Link(p.tmp, aside); err != nil {
		return false, err
	}
	if s.beforeSwap != nil {
		s.beforeSwap(p.abs)
	}
	err = exchange(aside, p.abs)
	if errors.Is(err, errNoExchange) {
		os.Remove(aside)
		return true, os.Rename(p.tmp, p.abs)
	}
	if err != nil {
		os.Remove(aside)
		return false, err
	}
	var out unix.Stat_t
	if err := unix.Lstat(aside, &out); err != nil {
		return true, nil // what came out was removed meanwhile
	}
	if out.Dev == checked.Dev && out.Ino == checked.Ino || p.isOurs(&out) {
		return true, removeAside(aside)
	}
	same, why, cerr := s.clobberCheck(ctx, p.jpath, p.abs, aside, &out, p.obj)
	if cerr == nil && out.Mode&unix.S_IFMT != unix.S_IFDIR && (same || why == "" || p.force) {
		if why != "" && !same {
			p.res.Replaced = fmt.Sprintf("%s: %s", p.abs, why)
		}
		return true, removeAside(aside)
	}
	// Put it back where it was, and take this Materialize's file out again.
	if err := exchange(aside, p.abs); err != nil {
		return false, fmt.Errorf("a file that reached %s while materializing is at %s; putting it back: %w", p.abs, aside, err)
	}
	var back unix.Stat_t
	if err := unix.Lstat(aside, &back); err != nil || !p.isOurs(&back) {
		return false, fmt.Errorf("files kept reaching %s while materializing; one of them is at %s", p.abs, aside)
	}
	if err := os.Remove(aside); err != nil {
		return false, err
	}
	if cerr != nil {
		return false, cerr
	}
	return false, nil
}

// removeAside removes the name swapIn gave a file it took out of the destination.
func removeAside(aside string) error {
	if err := os.Remove(aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
