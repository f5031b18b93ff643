// Package flock is the flock(2) idiom the module's lock files share: a whole-file advisory lock on
// an open file description, which dies with the process (even on SIGKILL) and which another open
// of the same file, in this process or another, does not share.
//
// Contracts:
//   - Lock calls flock(2) once as asked (how is unix.LOCK_SH, unix.LOCK_EX or unix.LOCK_UN, with
//     unix.LOCK_NB or not), retrying only when it is interrupted (EINTR). Its error is flock's errno,
//     unwrapped: unix.EWOULDBLOCK when LOCK_NB finds the lock held.
//   - Wait takes the lock how (LOCK_SH or LOCK_EX; LOCK_NB is added) by polling a non-blocking
//     flock with backoff (1 ms doubling to 100 ms), so that the wait stays cancellable: a blocking
//     flock could not be interrupted. It tries before it looks at ctx, so a free lock is taken even
//     when ctx is done. While the lock is held elsewhere it returns ctx.Err() (the same value) once
//     ctx is done; any other flock error it returns at once, unwrapped. waiting, when not nil, is
//     called once, at the first refusal found when the wait has lasted patience or longer (patience
//     0: at the first refusal), from Wait's goroutine.
//   - Unsupported reports whether err says the filesystem has no flock (ENOLCK, EOPNOTSUPP: some
//     NFS mounts), which callers treat as "go on unlocked" rather than as a failure.
//
// It imports nothing of the module (internal/depcheck), so that every layer, registry/oci included,
// may use it.
package flock

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// flockSys is flock(2); a variable for the EINTR test.
var flockSys = unix.Flock

// Backoff bounds of Wait's polling.
const (
	firstDelay = time.Millisecond
	maxDelay   = 100 * time.Millisecond
)

// Lock calls flock(2) on f with how, retrying on EINTR.
func Lock(f *os.File, how int) error {
	fd := int(f.Fd())
	for {
		err := flockSys(fd, how)
		if err != unix.EINTR {
			return err
		}
	}
}

// Wait takes the lock how on f, waiting while another open file description holds it, until ctx
// is done; waiting, if not nil, is called once when the wait has lasted patience (see the package
// doc).
func Wait(ctx context.Context, f *os.File, how int, patience time.Duration, waiting func()) error {
	delay := firstDelay
	start := time.Now()
	for {
		err := Lock(f, how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		if waiting != nil && time.Since(start) >= patience {
			waiting()
			waiting = nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, maxDelay)
	}
}

// Unsupported reports whether err (or an error it wraps) says the filesystem has no flock.
func Unsupported(err error) bool {
	return errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EOPNOTSUPP)
}
