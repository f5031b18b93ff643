package oci

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Bounds of the upload-session directory (WithUploadState).
const (
	// maxSessions is the most session files kept: the oldest beyond it are removed when a session
	// starts.
	maxSessions = 256
	// sessionTTL is how long a session is remembered after its last acknowledged chunk; registries
	// purge abandoned uploads after a while (distribution: 168 h by default).
	sessionTTL = 7 * 24 * time.Hour
	// maxSessionFile bounds what is read of a session file: a Location URL and a few fields.
	maxSessionFile = 16 << 10
	// staleTempAge: a temp file this old belongs to a writer that died between write and rename.
	staleTempAge = time.Hour
)

// session is one chunked upload as remembered in the state directory: the upload Location the
// registry last returned (after the last chunk it acknowledged) and the bytes acknowledged then.
// Credentials are never written: the Location's userinfo is removed before it is saved.
type session struct {
	Registry   string    `json:"registry"`
	Repository string    `json:"repository"`
	Digest     string    `json:"digest"`
	Size       int64     `json:"size"`
	Location   string    `json:"location"`
	Offset     int64     `json:"offset"`
	Updated    time.Time `json:"updated"`
}

// sessionStore keeps one small JSON file per (registry, repository, blob) in dir, written
// atomically (temp file and rename), so that a chunked upload interrupted by the process's death
// resumes in the next process. A missing, unreadable or inconsistent file is no session.
type sessionStore struct {
	dir string
}

// path is the session file of blob b in r's repository: the sha256 of registry, repository and
// digest, so that no name from the network becomes a path.
func (s *sessionStore) path(reg, repo, digest string) string {
	sum := sha256.Sum256([]byte(reg + "\n" + repo + "\n" + digest))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:])+".json")
}

// load returns the session remembered for the blob, or false. A file that is not a valid session
// of exactly this blob (garbage, another blob's, expired, a Location that is not an absolute
// http(s) URL) is removed, and bad says why.
func (s *sessionStore) load(reg, repo, digest string, size int64) (ss session, ok bool, bad error) {
	p := s.path(reg, repo, digest)
	f, err := os.Open(p)
	if err != nil {
		return session{}, false, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSessionFile+1))
	f.Close()
	switch {
	case err != nil:
		bad = err
	case len(b) > maxSessionFile:
		bad = fmt.Errorf("more than %d bytes", maxSessionFile)
	case json.Unmarshal(b, &ss) != nil:
		bad = fmt.Errorf("not a JSON session")
	case ss.Registry != reg || ss.Repository != repo || ss.Digest != digest || ss.Size != size:
		bad = fmt.Errorf("a session of %s/%s blob %s of %d bytes, want %s/%s %s of %d", ss.Registry, ss.Repository, ss.Digest, ss.Size, reg, repo, digest, size)
	case ss.Offset < 0 || ss.Offset > size:
		bad = fmt.Errorf("offset %d outside the %d-byte blob", ss.Offset, size)
	case time.Since(ss.Updated) > sessionTTL:
		bad = fmt.Errorf("expired: last chunk acknowledged at %s", ss.Updated.Format(time.RFC3339))
	case !validLocation(ss.Location):
		bad = fmt.Errorf("location is not an absolute http(s) URL without userinfo")
	default:
		return ss, true, nil
	}
	os.Remove(p)
	return session{}, false, fmt.Errorf("upload state %s: %w", p, bad)
}

// save writes ss atomically. The state directory is created (0700: it is per user) when missing.
func (s *sessionStore) save(ss session) error {
	ss.Location = stripUserinfo(ss.Location)
	if !validLocation(ss.Location) {
		return fmt.Errorf("upload state: Location %q of blob %s is not an absolute http(s) URL; not saved", ss.Location, ss.Digest)
	}
	ss.Updated = time.Now().UTC()
	b, err := json.Marshal(ss)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("upload state %s: %w", s.dir, err)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(s.dir, ".tmp-"+hex.EncodeToString(rnd[:]))
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("upload state %s: %w", s.dir, err)
	}
	p := s.path(ss.Registry, ss.Repository, ss.Digest)
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("upload state %s: %w", p, err)
	}
	return nil
}

// remove forgets the blob's session (completed, refused or gone).
func (s *sessionStore) remove(reg, repo, digest string) error {
	p := s.path(reg, repo, digest)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("upload state %s: %w", p, err)
	}
	return nil
}

// prune removes sessions older than sessionTTL, the oldest beyond maxSessions, and temp files
// and session locks (sessionlock.go) of processes that died.
func (s *sessionStore) prune() error {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("upload state %s: %w", s.dir, err)
	}
	type file struct {
		path string
		mod  time.Time
	}
	var live []file
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || !info.Mode().IsRegular() {
			continue
		}
		p := filepath.Join(s.dir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".tmp-"):
			if time.Since(info.ModTime()) > staleTempAge {
				os.Remove(p)
			}
		case strings.HasSuffix(e.Name(), ".lock"):
			if time.Since(info.ModTime()) > staleTempAge {
				removeDeadLock(p) // only when no Upload holds it
			}
		case strings.HasSuffix(e.Name(), ".json"):
			if time.Since(info.ModTime()) > sessionTTL {
				os.Remove(p)
				continue
			}
			live = append(live, file{p, info.ModTime()})
		}
	}
	if len(live) <= maxSessions {
		return nil
	}
	sort.Slice(live, func(i, j int) bool { return live[i].mod.After(live[j].mod) })
	for _, f := range live[maxSessions:] {
		os.Remove(f.path)
	}
	return nil
}

// validLocation reports whether loc is an absolute http(s) URL without userinfo.
func validLocation(loc string) bool {
	u, err := url.Parse(loc)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil
}

// stripUserinfo removes "user:password@" from a URL (a registry's Location carries none, but
// none is ever written to the state directory either way).
func stripUserinfo(loc string) string {
	u, err := url.Parse(loc)
	if err != nil || u.User == nil {
		return loc
	}
	u.User = nil
	return u.String()
}

// resumeSession returns the upload location and offset of the blob's session an earlier process
// left (WithUploadState), from the registry's own count of the bytes it holds (GET on the saved
// Location: 204 with Range). ok is false when there is none, or when asking fails in any way (the
// registry no longer has it or refuses it, or its host does not answer: a session must never make
// a push fail), or when the count is ambiguous (uploadStatus: "0-0" is no byte or one; the session
// then holds at most one byte, and starting afresh loses no more): the session is then forgotten
// and the reason logged at info level; an ambiguous one is also cancelled on the registry
// (cancelUpload). err is only ctx's.
func (r *Repo) resumeSession(ctx context.Context, b Blob) (loc string, off int64, ok bool, err error) {
	if r.o.sessions == nil {
		return "", 0, false, nil
	}
	ss, found, bad := r.o.sessions.load(r.repo.RegistryStr(), r.repo.RepositoryStr(), b.Digest, b.Size)
	if bad != nil {
		r.o.logger.Info("an unusable upload session was removed; uploading the blob afresh", "blob", b.Digest, "err", bad)
	}
	if !found {
		return "", 0, false, nil
	}
	got, known, next, err := r.uploadStatus(ctx, ss.Location)
	if err != nil && ctx.Err() != nil {
		return "", 0, false, fmt.Errorf("upload %s: asking the registry about the upload session an earlier push left: %w", b.Digest, ctx.Err())
	}
	if err == nil && !known {
		r.o.logger.Info("the registry's count of the bytes held by the upload session an earlier push left is ambiguous (no byte or one); uploading the blob afresh",
			"blob", b.Digest, "repository", r.repo.String(), "acknowledged", ss.Offset)
		r.cancelUpload(ctx, b, next)
		r.forgetSession(b)
		return "", 0, false, nil
	}
	if err == nil && got > b.Size {
		err = fmt.Errorf("the registry holds %d bytes of a %d-byte blob", got, b.Size)
	}
	if err != nil {
		r.o.logger.Info("the registry no longer has the upload session an earlier push left (or did not answer about it); uploading the blob afresh",
			"blob", b.Digest, "repository", r.repo.String(), "acknowledged", ss.Offset, "err", err)
		r.forgetSession(b)
		return "", 0, false, nil
	}
	r.o.logger.Info("resuming an interrupted upload from its remembered session", "blob", b.Digest, "repository", r.repo.String(),
		"at", got, "of", b.Size, "acknowledged", ss.Offset)
	r.saveSession(b, next, got)
	return next, got, true, nil
}

// saveSession remembers the blob's upload session at loc, off bytes acknowledged (WithUploadState).
// A state directory that cannot be written costs only the resumption: it is logged, and the
// upload goes on.
func (r *Repo) saveSession(b Blob, loc string, off int64) {
	if r.o.sessions == nil {
		return
	}
	if off == 0 {
		if err := r.o.sessions.prune(); err != nil {
			r.o.logger.Warn("cannot prune the upload state", "err", err)
		}
	}
	err := r.o.sessions.save(session{Registry: r.repo.RegistryStr(), Repository: r.repo.RepositoryStr(),
		Digest: b.Digest, Size: b.Size, Location: loc, Offset: off})
	if err != nil {
		r.o.logger.Warn("cannot remember the upload session; a push killed now starts this blob afresh", "blob", b.Digest, "err", err)
	}
}

// forgetSession removes the blob's remembered session (WithUploadState).
func (r *Repo) forgetSession(b Blob) {
	if r.o.sessions == nil {
		return
	}
	if err := r.o.sessions.remove(r.repo.RegistryStr(), r.repo.RepositoryStr(), b.Digest); err != nil {
		r.o.logger.Warn("cannot forget the upload session", "blob", b.Digest, "err", err)
	}
}
