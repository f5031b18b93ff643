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

// TestGCOutdated: with an Outdated predicate, du says what gc frees and gc removes the unpinned objects
// that only outdated action records name (another version of a stage, or a stage the caller does not
// run), whatever their age, and drops those records; an object a current record also names, a pinned
// one and one no record names stay, as do the current records.
func TestGCOutdated(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	var o []Object
	for i := range 6 {
		o = append(o, mustIngest(t, s, pattern(string(rune('a'+i)), 100_000+i)))
	}
	rec := func(key, stage string, version int, objs ...Object) ActionRecord {
		r := ActionRecord{Key: SumBytes([]byte(key)), Stage: stage, Version: version}
		for i, x := range objs {
			r.Outputs = append(r.Outputs, NamedObject{Name: string(rune('x' + i)), Digest: x.Digest, Size: x.Size})
		}
		if err := s.PutAction(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	rec("r1", "finalize", 5, o[0])       // outdated: o[0] goes
	rec("r2", "finalize", 5, o[1])       // outdated, but o[1] is also ...
	r3 := rec("r3", "tile", 1, o[1])     // ... a current record's
	rec("r4", "finalize", 5, o[2])       // outdated, o[2] pinned
	r5 := rec("r5", "finalize", 6, o[3]) // current
	rec("r6", "gone", 1, o[5])           // a stage the caller does not run: o[5] goes; o[4] has no record
	if err := s.Pin(ctx, "t", []Digest{o[2].Digest}); err != nil {
		t.Fatal(err)
	}
	current := map[string]int{"finalize": 6, "tile": 1}
	outdated := func(stage string, version int) bool { v, ok := current[stage]; return !ok || v != version }

	du, err := s.Usage(ctx, outdated, nil)
	if err != nil {
		t.Fatal(err)
	}
	disk := func(d Digest) int64 { return objectDisk(t, s, d) }
	if want := disk(o[0].Digest) + disk(o[5].Digest); du.OutdatedDisk != want {
		t.Errorf("du: outdated_disk %d, want o[0]'s and o[5]'s %d", du.OutdatedDisk, want)
	}
	if du0, err := s.Usage(ctx, nil, nil); err != nil || du0.OutdatedDisk != 0 {
		t.Errorf("du without a predicate: outdated_disk %d, %v", du0.OutdatedDisk, err)
	}

	rep, err := s.GC(ctx, GCOptions{Outdated: outdated})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Removed != 2 || rep.Freed != o[0].Size+o[5].Size || rep.Outdated != 4 || rep.ActionsRemoved != 0 {
		t.Fatalf("GC report %+v; want o[0] and o[5] removed, 4 outdated records dropped", rep)
	}
	for i, kept := range []bool{false, true, true, true, true, false} {
		if _, err := s.Stat(ctx, o[i].Digest); (err == nil) != kept {
			t.Errorf("object %d: Stat %v, want kept %v", i, err, kept)
		}
	}
	for _, r := range []ActionRecord{r3, r5} {
		if _, err := s.GetAction(ctx, r.Key); err != nil {
			t.Errorf("current record %s %d: %v", r.Stage, r.Version, err)
		}
	}
	for _, k := range []string{"r1", "r2", "r4", "r6"} {
		if _, err := s.GetAction(ctx, SumBytes([]byte(k))); !errors.Is(err, ErrNotFound) {
			t.Errorf("outdated record %s: %v, want ErrNotFound", k, err)
		}
	}
}

// TestGCOutdatedDownstream: with Inputs, the records downstream of an outdated one are outdated too
// (a tile that read only an outdated finalize's output, the pack that read that tile, the screen that
// read the pack), their unpinned objects go and du counts them beforehand; a record that read what a
// current record also made stays, as does one whose inputs are unknown, and a source no record made
// strands nothing.
func TestGCOutdatedDownstream(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	var o []Object
	for i := range 10 {
		o = append(o, mustIngest(t, s, pattern(string(rune('a'+i)), 50_000+i)))
	}
	inputs := map[Digest][]Digest{}
	rec := func(key, stage string, version int, in []Object, out Object) Digest {
		k := SumBytes([]byte(key))
		r := ActionRecord{Key: k, Stage: stage, Version: version, Outputs: []NamedObject{{Name: "out", Digest: out.Digest, Size: out.Size}}}
		if err := s.PutAction(ctx, r); err != nil {
			t.Fatal(err)
		}
		if in != nil {
			inputs[k] = []Digest{}
		}
		for _, x := range in {
			inputs[k] = append(inputs[k], x.Digest)
		}
		return k
	}
	src := o[9] // a source: no record made it
	rec("finalize-old", "finalize", 5, []Object{src}, o[0])
	rec("tile", "tile", 1, []Object{o[0]}, o[1])               // downstream of the outdated finalize only
	rec("pack", "write-orkpack", 2, []Object{o[1], src}, o[2]) // downstream of that tile; o[2] pinned
	rec("screen", "screen", 3, []Object{o[2], src}, o[3])      // and of the pack
	rec("finalize-new", "finalize", 6, []Object{src}, o[4])    // current
	rec("tile-new", "tile", 1, []Object{o[4]}, o[5])           // reads a current output: stays
	rec("finalize-old2", "finalize", 5, []Object{src}, o[6])   // outdated, but o[6] ...
	rec("finalize-same", "finalize", 6, []Object{src}, o[6])   // ... a current record made too
	rec("tile-shared", "tile", 1, []Object{o[6]}, o[7])        // so this tile stays
	rec("unknown", "tile", 1, nil, o[8])                       // inputs unknown (read o[0]): stays
	if err := s.Pin(ctx, "t", []Digest{o[2].Digest}); err != nil {
		t.Fatal(err)
	}
	current := map[string]int{"finalize": 6, "tile": 1, "write-orkpack": 2, "screen": 3}
	outdated := func(stage string, version int) bool { v, ok := current[stage]; return !ok || v != version }
	known := func(k Digest) ([]Digest, bool) { in, ok := inputs[k]; return in, ok }

	du, err := s.Usage(ctx, outdated, known)
	if err != nil {
		t.Fatal(err)
	}
	disk := func(d Digest) int64 { return objectDisk(t, s, d) }
	if want := disk(o[0].Digest) + disk(o[1].Digest) + disk(o[3].Digest); du.OutdatedDisk != want {
		t.Errorf("du: outdated_disk %d, want o[0], o[1] and o[3]'s %d", du.OutdatedDisk, want)
	}
	if du1, err := s.Usage(ctx, outdated, nil); err != nil || du1.OutdatedDisk != disk(o[0].Digest) {
		t.Errorf("du without inputs: outdated_disk %d (%v), want o[0]'s %d", du1.OutdatedDisk, err, disk(o[0].Digest))
	}

	rep, err := s.GC(ctx, GCOptions{Outdated: outdated, Inputs: known})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Removed != 3 || rep.Freed != o[0].Size+o[1].Size+o[3].Size || rep.Outdated != 5 || rep.Downstream != 3 {
		t.Fatalf("GC report %+v; want o[0], o[1], o[3] removed, 5 outdated records dropped (3 downstream)", rep)
	}
	for i, kept := range []bool{false, false, true, false, true, true, true, true, true, true} {
		if _, err := s.Stat(ctx, o[i].Digest); (err == nil) != kept {
			t.Errorf("object %d: Stat %v, want kept %v", i, err, kept)
		}
	}
	for key, want := range map[string]bool{"finalize-old": false, "tile": false, "pack": false, "screen": false,
		"finalize-old2": false, "finalize-new": true, "tile-new": true, "finalize-same": true, "tile-shared": true, "unknown": true} {
		_, err := s.GetAction(ctx, SumBytes([]byte(key)))
		if got := err == nil; got != want {
			t.Errorf("record %s: GetAction %v, want kept %v", key, err, want)
		}
	}
}
