package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
)

// verifyCounter is the real store, counting full re-hashes of objects (Verify).
type verifyCounter struct {
	*artifacts.Store
	verifies atomic.Int64
}

func (c *verifyCounter) Verify(ctx context.Context, d artifacts.Digest) error {
	c.verifies.Add(1)
	return c.Store.Verify(ctx, d)
}

// TestNoopRebuildDoesNotRehashExports: once the stat cache holds an export object's digest, a
// no-op rebuild re-hashes no object; an export changed in place (chmod + write, which moves its
// ctime) is still found, quarantined and rebuilt.
func TestNoopRebuildDoesNotRehashExports(t *testing.T) {
	resetCounts()
	s := &verifyCounter{Store: openStore(t, t.TempDir())}
	e := newEngine(t, s)
	opts := engine.BuildOptions{OutDir: t.TempDir()}
	first := mustBuild(t, e, "six", sixNodes("x"), opts)
	if first.Executed != 6 {
		t.Fatalf("cold build executed %d nodes, want 6", first.Executed)
	}
	// The stat cache does not trust a file whose timestamps are within its racy window (100ms) of
	// the moment it was hashed: let the objects age past it, then warm the cache with one rebuild.
	time.Sleep(250 * time.Millisecond)
	mustBuild(t, e, "six", sixNodes("x"), opts)

	s.verifies.Store(0)
	resetCounts()
	res := mustBuild(t, e, "six", sixNodes("x"), opts)
	if res.Executed != 0 || res.Cached != 6 {
		t.Fatalf("no-op rebuild: executed %d cached %d, want 0 and 6", res.Executed, res.Cached)
	}
	if n := s.verifies.Load(); n != 0 {
		t.Errorf("no-op rebuild with a warm stat cache re-hashed %d objects, want 0", n)
	}

	zOut := objectOf(t, s.Store, nodeResult(t, first, "z").Key)
	flipByte(t, objectPath(t, s.Store, zOut), 1)
	opts.OutDir = t.TempDir() // the old z.bin shares the corrupted inode; materialize afresh
	resetCounts()
	res = mustBuild(t, e, "six", sixNodes("x"), opts)
	if got := executedTags(); got != "z" {
		t.Errorf("after corrupting the exported z in place: executed %q, want %q", got, "z")
	}
	if res.Passes != 2 || quarantined(t, s.Store) != 1 {
		t.Errorf("corrupt export: %d passes, %d quarantined; want 2 and 1", res.Passes, quarantined(t, s.Store))
	}
	if err := s.Store.Verify(context.Background(), zOut); err != nil {
		t.Errorf("z's output after the rebuild: %v", err)
	}
}
