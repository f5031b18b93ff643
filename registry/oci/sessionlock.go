package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"orkpipe/internal/flock"
)

// A remembered upload session (WithUploadState) is used by one Upload at a time: its state file
// has a lock file beside it, <sha256>.lock, flock(2)ed by the Upload of that blob to that repository
// from before it reads the session until it returns. Another Upload of the same blob to the same
// repository, in another process or in this one (each lock opens its own file description), waits
// for it, and then asks the registry for the blob again: it is the same bytes, so once the holder
// has committed them the waiter sends nothing, and when the holder failed or died the waiter
// resumes its session from what the registry holds. (Starting a session of its own instead would
// send the whole blob twice at once, and that session could not be remembered: the file is the
// holder's.) Without the lock, the second resumed the first's session and both PATCHed it: the
// registry received bytes twice and one of them failed (TestUploadConcurrentSameBlob).
//
// The holder removes the lock file before it releases the lock, so that the directory keeps no
// lock file per blob ever pushed; a process that dies holding one leaves it, unlocked, and the next
// Upload of that blob takes it over (prune removes those of other blobs after staleTempAge). A lock
// taken on a file that its holder removed meanwhile, or that was replaced, excludes no one: the
// path is opened and locked again until the lock is on the file the path names.
//
// An Upload that finds the blob already in the repository forgets its session (one a process
// killed between its final PUT and forgetting it left) under the same lock, taken without waiting:
// a session whose lock is held is its holder's (forgetCommitted).
//
// The flock idiom (EINTR retried, a non-blocking lock polled so that the wait stays cancellable) is
// internal/flock's, the one package of the module registry/oci may import (internal/depcheck).

// lockPath is the lock file of the blob's session.
func (s *sessionStore) lockPath(reg, repo, digest string) string {
	return strings.TrimSuffix(s.path(reg, repo, digest), ".json") + ".lock"
}

// lock takes the blob's session lock (see above), waiting while another Upload holds it; waiting,
// when given, is called once, when it finds the lock held. The state directory is created (0700)
// when missing, the lock file 0600. It fails when ctx is done (with ctx's error), or when the lock
// file cannot be created or locked (a read-only directory, a filesystem without flock).
func (s *sessionStore) lock(ctx context.Context, reg, repo, digest string, waiting func()) (unlock func(), err error) {
	p := s.lockPath(reg, repo, digest)
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("upload state %s: %w", s.dir, err)
	}
	// waiting is called once, at the first refusal, however many times the path is locked again.
	refused := func() {
		if waiting != nil {
			waiting()
			waiting = nil
		}
	}
	for {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("upload state lock %s: %w", p, err)
		}
		if err := flock.Wait(ctx, f, unix.LOCK_EX, 0, refused); err != nil {
			f.Close()
			if err != ctx.Err() {
				err = fmt.Errorf("flock: %w", err)
			}
			return nil, fmt.Errorf("upload state lock %s: %w", p, err)
		}
		same, err := namesFile(p, f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("upload state lock %s: %w", p, err)
		}
		if same {
			return func() {
				os.Remove(p) // while locked: see above
				f.Close()    // releases the lock
			}, nil
		}
		f.Close() // its holder removed it: lock the file the path names now
	}
}

// namesFile reports whether path names the file f has open (false when path is gone).
func namesFile(path string, f *os.File) (bool, error) {
	open, err := f.Stat()
	if err != nil {
		return false, err
	}
	named, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(open, named), nil
}

// removeDeadLock removes the lock file p when no Upload holds it (prune: a process died holding it).
func removeDeadLock(p string) {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	if flock.Lock(f, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return
	}
	if same, err := namesFile(p, f); err == nil && same {
		os.Remove(p)
	}
}

// lockSession makes this Upload of b the only one using the blob's remembered session
// (WithUploadState) until unlock is called (see the comment at the top of this file). It returns
// the Repo the upload goes on with: r; or, when the lock cannot be taken for another reason than
// ctx (the state directory cannot be written, or its filesystem has no flock), r without upload
// state, so that the session is neither resumed nor remembered by an upload that does not own it
// (logged at warn level). waited reports that another Upload held the lock. err is only ctx's.
func (r *Repo) lockSession(ctx context.Context, b Blob) (ru *Repo, unlock func(), waited bool, err error) {
	if r.o.sessions == nil {
		return r, func() {}, false, nil
	}
	p := r.o.sessions.lockPath(r.repo.RegistryStr(), r.repo.RepositoryStr(), b.Digest)
	unlock, err = r.o.sessions.lock(ctx, r.repo.RegistryStr(), r.repo.RepositoryStr(), b.Digest, func() {
		waited = true
		r.o.logger.Info("another upload of this blob to this repository (another orkpipe push) holds its upload session; waiting for it",
			"blob", b.Digest, "repository", r.repo.String(), "lock", p)
	})
	if err != nil && ctx.Err() != nil {
		return nil, nil, false, fmt.Errorf("upload %s: waiting for another upload of it to %s: %w", b.Digest, r.repo, ctx.Err())
	}
	if err != nil {
		// Once per state directory and process at warn level: the next blobs' lock fails alike.
		level := slog.LevelDebug
		if _, warned := unlockableDirs.LoadOrStore(r.o.sessions.dir, true); !warned {
			level = slog.LevelWarn
		}
		r.o.logger.Log(ctx, level, "cannot lock the blob's upload session; uploading it without remembering the session (a push killed now starts this blob afresh; said once per state directory, then at debug level)",
			"blob", b.Digest, "dir", r.o.sessions.dir, "err", err)
		return r.withoutState(), func() {}, false, nil
	}
	return r, unlock, waited, nil
}

// unlockableDirs holds the state directories whose session lock could not be taken (lockSession
// has warned of them).
var unlockableDirs sync.Map

// forgetCommitted forgets the remembered session of b, which the repository holds (Upload found it
// there), under the blob's session lock, taken without waiting: when another Upload holds the lock,
// the session is that Upload's to use and to forget (it does when it ends, the blob being there),
// and it is left. When the lock cannot be taken for another reason (a filesystem without flock, a
// state directory that cannot be written), no Upload can hold it either, and the session is
// forgotten. A blob without a session file takes no lock (no lock file is created for every blob
// found present).
func (r *Repo) forgetCommitted(b Blob) {
	if r.o.sessions == nil {
		return
	}
	reg, repo := r.repo.RegistryStr(), r.repo.RepositoryStr()
	if _, err := os.Lstat(r.o.sessions.path(reg, repo, b.Digest)); err != nil {
		return
	}
	// flock.Wait tries once before it looks at ctx: with ctx already done, lock only tries.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	unlock, err := r.o.sessions.lock(done, reg, repo, b.Digest, nil)
	if errors.Is(err, done.Err()) {
		return // another Upload holds it
	}
	if err == nil {
		defer unlock()
	}
	r.forgetSession(b)
}

// withoutState returns a copy of r that remembers no upload session.
func (r *Repo) withoutState() *Repo {
	o := *r.o
	o.sessions = nil
	c := *r
	c.o = &o
	return &c
}
