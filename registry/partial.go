package registry

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"orkpipe/registry/oci"
)

// PartialDir is the directory, beside the pulled files, that holds the state of unfinished pulls:
//
//	DIR/.orkpipe-partial/<manifest sha256 hex>/
//	    lock         flock(2)ed by the pull in progress
//	    journal      one line per verified part: "<file>\t<part index>\t<layer digest>\n", appended
//	                 only after the part's bytes were verified and written
//	    <file>       the file being assembled, full length, sparse, written at the parts' extents
//
// A resumed pull re-hashes every journaled part from disk before trusting it (a record whose bytes
// no longer match, e.g. lost in a power failure, is dropped and the part downloaded again). That is
// why neither the parts nor the journal are fsynced as they land; the finished file is, before its
// rename into DIR. A finished file is verified whole and
// renamed into DIR; the state directory is removed when the whole artifact is in place.
const PartialDir = ".orkpipe-partial"

type partialState struct {
	dir  string
	lock *os.File
	mu   sync.Mutex
	jnl  *os.File
	done map[string]bool // "<file>\t<index>\t<digest>"
}

// openPartial creates or reopens the state directory of manifest digest hex in dir and locks it.
func openPartial(dir, manifestHex string) (*partialState, error) {
	p := filepath.Join(dir, PartialDir, manifestHex)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(p, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: another pull of this artifact into %s is running", p, dir)
		}
		return nil, fmt.Errorf("%s: lock: %w", p, err)
	}
	st := &partialState{dir: p, lock: lock, done: map[string]bool{}}
	jpath := filepath.Join(p, "journal")
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
	if len(f) != 3 || validName(f[0]) != nil || !validSHA256(f[2]) {
		return "", false
	}
	i, err := strconv.Atoi(f[1])
	if err != nil || i < 0 || strconv.Itoa(i) != f[1] {
		return "", false
	}
	return line, true
}

// recorded reports whether part p of file was journaled as verified.
func (s *partialState) recorded(file string, p Part) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done[journalKey(file, p.Index, p.Layer.Digest.String())]
}

// record journals part p of file as verified (its bytes written to the partial file).
func (s *partialState) record(file string, p Part) error {
	k := journalKey(file, p.Index, p.Layer.Digest.String())
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.jnl.WriteString(k + "\n"); err != nil {
		return fmt.Errorf("%s: journal: %w", s.dir, err)
	}
	s.done[k] = true
	return nil
}

func (s *partialState) dataPath(file string) string { return filepath.Join(s.dir, file) }

func (s *partialState) close() {
	if s.jnl != nil {
		s.jnl.Close()
	}
	s.lock.Close()
}

// remove deletes the state directory (after every file is in place).
func (s *partialState) remove() error {
	s.close()
	if err := os.RemoveAll(s.dir); err != nil {
		return err
	}
	os.Remove(filepath.Dir(s.dir)) // only succeeds when no other artifact's state is left
	return nil
}

// checkLocal re-hashes part p's extents in f and reports whether they match its diffID. The same
// pass feeds pt (when not nil) the part's BLAKE3 pieces, to be kept only on a match.
func checkLocal(ctx context.Context, f io.ReaderAt, p Part, pt *partTree) bool {
	h := sha256.New()
	var w io.Writer = h
	if pt != nil {
		w = io.MultiWriter(h, pt)
	}
	if _, err := io.CopyBuffer(w, oci.CtxReader{Ctx: ctx, R: extentsReader(f, p.Extents)}, make([]byte, fetchBuffer)); err != nil {
		return false
	}
	if "sha256:"+hex.EncodeToString(h.Sum(nil)) != p.RawSHA256 {
		return false
	}
	if pt != nil {
		pt.close()
	}
	return true
}

// extentWriter writes a byte stream into a file at the offsets of a list of extents (pwrite).
type extentWriter struct {
	f    io.WriterAt
	exts []Extent
	i    int
	off  int64 // within exts[i]
	// writeback, when set, is called with each contiguous run of about writebackEvery bytes
	// written (a hint to start writing them to disk).
	writeback    func(off, n int64)
	wbOff, wbLen int64
}

// written records n bytes written at off for the writeback hint.
func (w *extentWriter) written(off, n int64) {
	if w.writeback == nil {
		return
	}
	if w.wbLen > 0 && w.wbOff+w.wbLen != off {
		w.writeback(w.wbOff, w.wbLen)
		w.wbLen = 0
	}
	if w.wbLen == 0 {
		w.wbOff = off
	}
	w.wbLen += n
	if w.wbLen >= writebackEvery {
		w.writeback(w.wbOff, w.wbLen)
		w.wbLen = 0
	}
}

func (w *extentWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if w.i >= len(w.exts) {
			return written, fmt.Errorf("%w: more bytes than the part's extents hold", ErrDigestMismatch)
		}
		e := w.exts[w.i]
		n := min(int64(len(p)), e.Len-w.off)
		m, err := w.f.WriteAt(p[:n], e.Off+w.off)
		written += m
		w.written(e.Off+w.off, int64(m))
		if err != nil {
			return written, err
		}
		w.off += n
		p = p[n:]
		if w.off == e.Len {
			w.i++
			w.off = 0
		}
	}
	return written, nil
}

// renameNoReplace renames src to dst and fails if dst exists (a file that appeared meanwhile is
// never clobbered).
func renameNoReplace(src, dst string) error {
	err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		if err = os.Link(src, dst); err == nil {
			err = os.Remove(src)
		}
	}
	return err
}
