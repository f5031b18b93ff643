package artifacts

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// used sets the object's last-use time (its access marker) to t.
func used(tb testing.TB, s *Store, d Digest, at time.Time) {
	tb.Helper()
	s.touch(d)
	if err := os.Chtimes(s.accessPath(d), at, at); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chtimes(s.objectPath(d), at, at); err != nil {
		tb.Fatal(err)
	}
}

func TestGCLeastRecentlyUsedFirstKeepsPins(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	now := time.Now()
	// Five 100 KB objects used 5, 4, 3, 2, 1 hours ago. The oldest is pinned.
	var objs []Object
	for i := range 5 {
		o := mustIngest(t, s, pattern(string(rune('a'+i)), 100_000))
		used(t, s, o.Digest, now.Add(-time.Duration(5-i)*time.Hour))
		objs = append(objs, o)
	}
	if err := s.Pin(ctx, "qwen-27b", []Digest{objs[0].Digest}); err != nil {
		t.Fatal(err)
	}
	rec := ActionRecord{Key: SumBytes([]byte("k1")), Stage: "tile", Outputs: []NamedObject{{Name: "x", Digest: objs[1].Digest, Size: objs[1].Size}}}
	if err := s.PutAction(ctx, rec); err != nil {
		t.Fatal(err)
	}
	keep := ActionRecord{Key: SumBytes([]byte("k2")), Stage: "tile", Outputs: []NamedObject{{Name: "x", Digest: objs[4].Digest, Size: objs[4].Size}}}
	if err := s.PutAction(ctx, keep); err != nil {
		t.Fatal(err)
	}
	// Reading object 2 makes it recently used: it must survive instead of 3.
	if _, err := readAll(t, s, objs[2].Digest); err != nil {
		t.Fatal(err)
	}

	rep, err := s.GC(ctx, GCOptions{MaxSize: 300_000})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Objects != 5 || rep.Removed != 2 || rep.Freed != 200_000 || rep.Pinned != 1 || rep.ActionsRemoved != 1 || rep.OverBudget {
		t.Fatalf("GC report %+v; want 2 of 5 removed, 1 pinned, 1 action dropped", rep)
	}
	for i, wantKept := range []bool{true, false, true, false, true} {
		_, err := s.Stat(ctx, objs[i].Digest)
		if kept := err == nil; kept != wantKept {
			t.Errorf("object %d (used %dh ago): kept=%v, want %v (err %v)", i, 5-i, kept, wantKept, err)
		}
	}
	if _, err := s.GetAction(ctx, rec.Key); !errors.Is(err, ErrNotFound) {
		t.Fatalf("action of a collected output: %v, want a miss", err)
	}
	if _, err := s.GetAction(ctx, keep.Key); err != nil {
		t.Fatalf("action of a kept output: %v", err)
	}

	// Re-pinning the name releases the old pin: now the pinned object is collectable by age.
	if err := s.Pin(ctx, "qwen-27b", []Digest{objs[4].Digest}); err != nil {
		t.Fatal(err)
	}
	used(t, s, objs[0].Digest, now.Add(-5*time.Hour)) // Pin and Stat count as use; age it again
	rep, err = s.GC(ctx, GCOptions{MaxAge: 90 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Removed != 1 {
		t.Fatalf("MaxAge GC report %+v, want the formerly pinned 5h-old object removed", rep)
	}
	if _, err := s.Stat(ctx, objs[0].Digest); !errors.Is(err, ErrNotFound) {
		t.Fatalf("formerly pinned object: %v", err)
	}
	if _, err := s.Stat(ctx, objs[2].Digest); err != nil {
		t.Fatalf("recently read object: %v", err)
	}
}

func TestGCBusyAndOptions(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	if _, err := s.GC(ctx, GCOptions{}); err == nil {
		t.Fatal("GC without bounds succeeded")
	}
	other, err := OpenStore(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	o := mustIngest(t, s, []byte("x"))
	used(t, s, o.Digest, time.Now().Add(-time.Hour))
	if _, err := s.GC(ctx, GCOptions{MaxAge: time.Minute}); !errors.Is(err, ErrBusy) {
		t.Fatalf("GC with another Store open: %v, want ErrBusy", err)
	}
	if _, err := s.Stat(ctx, o.Digest); err != nil {
		t.Fatalf("busy GC removed something: %v", err)
	}
	other.Close()
	used(t, s, o.Digest, time.Now().Add(-time.Hour)) // the Stat above counted as use
	rep, err := s.GC(ctx, GCOptions{MaxAge: time.Minute})
	if err != nil || rep.Removed != 1 {
		t.Fatalf("GC after the other Store closed: %+v, %v", rep, err)
	}
	// The store is still usable (its shared lock was re-taken).
	mustIngest(t, s, []byte("after gc"))
}

func TestGCPrunesEntriesOfVanishedPaths(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	dir := t.TempDir()
	keep, gone := filepath.Join(dir, "keep"), filepath.Join(dir, "gone")
	for _, p := range []string{keep, gone} {
		os.WriteFile(p, []byte(p), 0o644)
	}
	settle()
	for _, p := range []string{keep, gone} {
		if _, err := s.HashFile(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(gone)
	o := mustIngest(t, s, []byte("x"))
	used(t, s, o.Digest, time.Now().Add(-time.Hour))
	rep, err := s.GC(ctx, GCOptions{MaxAge: time.Minute})
	if err != nil || rep.EntriesRemoved != 1 {
		t.Fatalf("GC = %+v, %v; want the stat entry of the removed path pruned", rep, err)
	}
	if _, err := os.Stat(s.keyPath("stat", keep)); err != nil {
		t.Fatalf("entry of an existing path pruned: %v", err)
	}
}

// TestPinUnchangedIsNotRewritten: pinning the objects a name already pins leaves its record alone
// (the same file); pinning other objects, or the same in another order, replaces it.
func TestPinUnchangedIsNotRewritten(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	a, b := mustIngest(t, s, pattern("a", 1000)), mustIngest(t, s, pattern("b", 1000))
	pin := filepath.Join(s.dir, "pins", SumBytes([]byte("t")).Hex()+".json")
	var prev []Digest
	var prevFile os.FileInfo
	for _, objs := range [][]Digest{{a.Digest}, {a.Digest}, {a.Digest, b.Digest}, {a.Digest, b.Digest}, {b.Digest, a.Digest}} {
		if err := s.Pin(ctx, "t", objs); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(pin)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(pin)
		if err != nil {
			t.Fatal(err)
		}
		var rec pinRecord
		if err := json.Unmarshal(raw, &rec); err != nil || rec.Name != "t" || !slices.Equal(rec.Objects, objs) {
			t.Errorf("pin %v: record %s (%v)", objs, raw, err)
		}
		rewritten := prevFile == nil || !os.SameFile(prevFile, fi)
		if want := !slices.Equal(prev, objs); rewritten != want {
			t.Errorf("pin %v after %v: record rewritten %v, want %v", objs, prev, rewritten, want)
		}
		prev, prevFile = objs, fi
	}
}

// TestPresentDoesNotMarkUse: Present reports an object like Stat (absent: ErrNotFound; not a
// regular file: an error) but leaves its last-use time alone; MarkUsed and Stat move it to now.
func TestPresentDoesNotMarkUse(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	o := mustIngest(t, s, pattern("p", 1000))
	o2 := mustIngest(t, s, pattern("q", 10))
	old := time.Now().Add(-72 * time.Hour)
	lastUse := func(d Digest) time.Time {
		return s.lastUse(objectEntry{Object: Object{Digest: d}, path: s.objectPath(d)})
	}
	for _, d := range []Digest{o.Digest, o2.Digest} {
		used(t, s, d, old)
	}
	if got, err := s.Present(ctx, o.Digest); err != nil || got != o {
		t.Fatalf("Present = %v, %v; want %v", got, err, o)
	}
	if u := lastUse(o.Digest); u.After(old.Add(time.Second)) {
		t.Errorf("Present marked the object used at %s", u)
	}
	if _, err := s.Present(ctx, SumBytes([]byte("absent"))); !errors.Is(err, ErrNotFound) {
		t.Errorf("Present of an absent object: %v, want ErrNotFound", err)
	}
	s.MarkUsed([]Digest{o.Digest, o2.Digest})
	for _, d := range []Digest{o.Digest, o2.Digest} {
		if u := lastUse(d); time.Since(u) > time.Minute {
			t.Errorf("MarkUsed left %s's last use at %s", d, u)
		}
	}
	used(t, s, o.Digest, old)
	if _, err := s.Stat(ctx, o.Digest); err != nil {
		t.Fatal(err)
	}
	if u := lastUse(o.Digest); time.Since(u) > time.Minute {
		t.Errorf("Stat left the last use at %s", u)
	}
	p := s.objectPath(o2.Digest)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Present(ctx, o2.Digest); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Present of a directory in an object's place: %v, want a not-a-regular-file error", err)
	}
}
