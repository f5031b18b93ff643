package registry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestHoleHashingStopsWithContext: a range of a terabyte of holes (a manifest may declare one with a
// single data byte; hashing it takes minutes, five times with the retries) stops hashing once the
// context is done, and its check says so instead of a digest.
func TestHoleHashingStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := File{Name: "holes.bin"}
	f.Digests.Size = 1 << 40
	h, err := newRangeHash(ctx, f, Range{Off: 0, Len: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, cancel)
	done := make(chan struct{})
	go func() {
		h.zerosTo(1 << 40)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // a terabyte takes about five minutes here
		t.Fatal("still hashing a minute after the context was canceled")
	}
	if err := h.check(f, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("check after cancel: %v, want context.Canceled", err)
	}
}
