package engine

import (
	"context"
	"testing"

	"orkpipe/artifacts"
)

// TestTryLockKey holds artifacts.Store.LockKey to what tryLockKey relies on: given a context that
// is already done, it takes a free key lock, and returns at once, without it, while another Store
// of the directory (as another process) holds the lock.
func TestTryLockKey(t *testing.T) {
	dir := t.TempDir()
	s, err := artifacts.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := artifacts.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	key := artifacts.SumBytes([]byte("node key"))

	unlock, ok := tryLockKey(s, key)
	if !ok {
		t.Fatal("tryLockKey of a free key lock: not taken")
	}
	if _, ok := tryLockKey(other, key); ok {
		t.Fatal("tryLockKey took a key lock another Store holds")
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	unlock, ok = tryLockKey(other, key)
	if !ok {
		t.Fatal("tryLockKey of a key lock just released: not taken")
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	// And the waiting form still takes it (the path a failed try goes down).
	u, err := s.LockKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if err := u(); err != nil {
		t.Fatal(err)
	}
}
