package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// open opens the file p as a new open file description (its own lock).
func open(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// held returns a lock file held exclusively by one open file description, and a second one on the
// same file for the test's Wait.
func held(t *testing.T) (holder, f *os.File) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.lock")
	holder, f = open(t, p), open(t, p)
	if err := Lock(holder, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return holder, f
}

// TestWaitCancelled: while another open file description holds the lock, Wait returns ctx's error
// (the same value) once ctx is done, after calling waiting once, and the lock stays the holder's.
func TestWaitCancelled(t *testing.T) {
	_, f := held(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	err := Wait(ctx, f, unix.LOCK_EX, 0, func() { calls++; cancel() })
	if err == nil || err != ctx.Err() {
		t.Fatalf("Wait on a held lock with ctx cancelled: %v, want ctx's error %v", err, ctx.Err())
	}
	if calls != 1 {
		t.Fatalf("waiting called %d times, want 1 (patience 0: at the first refusal)", calls)
	}
	if err := Lock(f, unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("a shared lock after the cancelled Wait: %v, want EWOULDBLOCK (still the holder's)", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := Wait(ctx, f, unix.LOCK_SH, time.Hour, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait for a shared lock on a held one past ctx's deadline: %v, want DeadlineExceeded", err)
	}
}

// TestWaitTakesReleasedLock: Wait takes the lock once its holder releases it (here, from waiting),
// and then holds it against other open file descriptions.
func TestWaitTakesReleasedLock(t *testing.T) {
	holder, f := held(t)
	calls := 0
	err := Wait(context.Background(), f, unix.LOCK_EX, 0, func() {
		calls++
		if err := holder.Close(); err != nil { // closing releases the lock
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatalf("Wait after the holder released: %v", err)
	}
	if calls != 1 {
		t.Fatalf("waiting called %d times, want 1", calls)
	}
	other := open(t, f.Name())
	if err := Lock(other, unix.LOCK_SH|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
		t.Fatalf("another open file description's lock after Wait: %v, want EWOULDBLOCK", err)
	}
}

// TestWaitPatience: waiting is called once, not before the wait has lasted patience, however many
// more refusals follow before the lock is free.
func TestWaitPatience(t *testing.T) {
	holder, f := held(t)
	const patience = 20 * time.Millisecond
	start := time.Now()
	calls := 0
	var after time.Duration
	err := Wait(context.Background(), f, unix.LOCK_EX, patience, func() {
		calls++
		after = time.Since(start)
		// Release only after several more polls (the backoff reaches 100 ms).
		time.AfterFunc(300*time.Millisecond, func() { holder.Close() })
	})
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if calls != 1 {
		t.Fatalf("waiting called %d times, want 1", calls)
	}
	if after < patience {
		t.Fatalf("waiting called after %s, before the patience of %s", after, patience)
	}
}

// TestWaitFreeLock: a free lock is taken without calling waiting, even when ctx is already done.
func TestWaitFreeLock(t *testing.T) {
	f := open(t, filepath.Join(t.TempDir(), "x.lock"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Wait(ctx, f, unix.LOCK_SH, 0, func() { t.Error("waiting called on a free lock") })
	if err != nil {
		t.Fatalf("Wait on a free lock with ctx done: %v, want nil", err)
	}
}

// TestWaitOtherError: a flock error other than a refusal is returned at once, unwrapped, without
// waiting.
func TestWaitOtherError(t *testing.T) {
	f := open(t, filepath.Join(t.TempDir(), "x.lock"))
	err := Wait(context.Background(), f, unix.LOCK_SH|unix.LOCK_EX, 0, func() { t.Error("waiting called") })
	if err != unix.EINVAL {
		t.Fatalf("Wait with an invalid how: %v, want EINVAL", err)
	}
}

// TestLockRetriesEINTR: Lock calls flock again while it is interrupted, and returns its first other
// answer.
func TestLockRetriesEINTR(t *testing.T) {
	defer func(s func(int, int) error) { flockSys = s }(flockSys)
	var calls []int
	answers := []error{unix.EINTR, unix.EINTR, unix.EWOULDBLOCK, nil}
	flockSys = func(fd, how int) error {
		calls = append(calls, how)
		err := answers[0]
		answers = answers[1:]
		return err
	}
	f := open(t, filepath.Join(t.TempDir(), "x.lock"))
	if err := Lock(f, unix.LOCK_EX|unix.LOCK_NB); err != unix.EWOULDBLOCK {
		t.Fatalf("Lock: %v, want EWOULDBLOCK (the answer after two EINTRs)", err)
	}
	if len(calls) != 3 {
		t.Fatalf("flock called %d times, want 3", len(calls))
	}
	for _, how := range calls {
		if how != unix.LOCK_EX|unix.LOCK_NB {
			t.Fatalf("flock called with how %#x, want %#x", how, unix.LOCK_EX|unix.LOCK_NB)
		}
	}
}

// TestUnsupported: ENOLCK and EOPNOTSUPP, wrapped or not, say no flock; a refusal or nil does not.
func TestUnsupported(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{unix.ENOLCK, true},
		{fmt.Errorf("lock x: %w", unix.EOPNOTSUPP), true},
		{unix.EWOULDBLOCK, false},
		{context.Canceled, false},
		{nil, false},
	} {
		if got := Unsupported(tc.err); got != tc.want {
			t.Errorf("Unsupported(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
