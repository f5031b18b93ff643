package artifacts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"orkpipe/internal/flock"
)

// lockPatience is how long a lock wait is silent before it is logged (a variable for tests).
var lockPatience = 2 * time.Second

// LockKey takes an exclusive flock on locks/<h0h1>/<hex>.lock for the node key and returns the
// function that releases it. It excludes other processes and, because each call opens its own
// file description, other goroutines of this process too. It waits until the lock is free or ctx
// is done (then it returns ctx's error); it tries the lock before it looks at ctx, so with ctx
// already done it takes a free lock and returns ctx's error only for a held one (flock.Wait: the
// engine's try form, TestTryLockKey). The lock dies with the process. Lock files are deleted
// only by GC, under the exclusive store lock: deleting one another process holds or waits on would
// let two holders lock different inodes, and every caller has a Store open.
func (s *Store) LockKey(ctx context.Context, key Digest) (unlock func() error, err error) {
	if key.IsZero() {
		return nil, fmt.Errorf("lock: %w: zero key", ErrInvalidDigest)
	}
	if err := s.writable("lock " + key.String()); err != nil {
		return nil, err
	}
	p := s.fanPath("locks", key.Hex(), ".lock")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", key, err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", key, err)
	}
	if err := flock.Wait(ctx, f, unix.LOCK_EX, lockPatience, func() {
		s.log.Info("waiting for another build doing the same work (a node with this key, in another orkpipe process or in this one)", "key", key.String(), "lock", p)
	}); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s (%s): %w", key, p, err)
	}
	released := false
	return func() error {
		if released {
			return nil
		}
		released = true
		err := flock.Lock(f, unix.LOCK_UN)
		return errors.Join(err, f.Close())
	}, nil
}
