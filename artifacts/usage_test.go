package artifacts

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestUsage: objects count under the stage whose action record names them (an object two stages made,
// under the first by name; one no record names, under ""), with their sizes and the disk their files
// take (a sparse object far less than its size), pins counted apart; an invalid record is skipped.
func TestUsage(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	a := mustIngest(t, s, pattern("a", 100_000))
	b := mustIngest(t, s, pattern("b", 200_000))
	free := mustIngest(t, s, pattern("c", 50_000))
	// A sparse object: 8 MiB of which one page is data.
	sparse := make([]byte, 8<<20)
	copy(sparse[4<<20:], "data")
	hole := mustIngest(t, s, sparse)
	for _, rec := range []ActionRecord{
		{Key: SumBytes([]byte("k1")), Stage: "tile", Outputs: []NamedObject{{Name: "x", Digest: a.Digest, Size: a.Size}}},
		{Key: SumBytes([]byte("k2")), Stage: "calibrate", Outputs: []NamedObject{{Name: "h", Digest: b.Digest, Size: b.Size}, {Name: "y", Digest: a.Digest, Size: a.Size}}},
		{Key: SumBytes([]byte("k3")), Stage: "emit-stub", Outputs: []NamedObject{{Name: "stub", Digest: hole.Digest, Size: hole.Size}}},
	} {
		if err := s.PutAction(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	bad := s.actionPath(SumBytes([]byte("bad")))
	if err := os.MkdirAll(filepath.Dir(bad), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Pin(ctx, "t", []Digest{b.Digest}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Usage(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	disk := func(d Digest) int64 { return objectDisk(t, s, d) }
	if rep.Objects != 4 || rep.Bytes != a.Size+b.Size+free.Size+hole.Size || rep.Pinned != 1 || rep.PinnedDisk != disk(b.Digest) || rep.ActionCount != 3 {
		t.Errorf("report %+v", rep)
	}
	if d := disk(hole.Digest); d >= 1<<20 {
		t.Errorf("the sparse object takes %d bytes on disk, want its data's blocks", d)
	}
	want := map[string]StageUsage{
		"calibrate": {Stage: "calibrate", Objects: 2, Bytes: a.Size + b.Size, Disk: disk(a.Digest) + disk(b.Digest), PinnedDisk: disk(b.Digest)},
		"emit-stub": {Stage: "emit-stub", Objects: 1, Bytes: hole.Size, Disk: disk(hole.Digest)},
		"":          {Stage: "", Objects: 1, Bytes: free.Size, Disk: disk(free.Digest)},
	}
	var sum int64
	for i, u := range rep.Stages {
		sum += u.Disk
		if u != want[u.Stage] {
			t.Errorf("stage %q: %+v, want %+v", u.Stage, u, want[u.Stage])
		}
		if i > 0 && u.Disk > rep.Stages[i-1].Disk {
			t.Errorf("stages not by disk, most first: %+v", rep.Stages)
		}
	}
	if len(rep.Stages) != len(want) || sum != rep.Disk {
		t.Errorf("stages %+v: want %d of them summing to %d", rep.Stages, len(want), rep.Disk)
	}
}

// objectDisk is the disk object d's file takes.
func objectDisk(t testing.TB, s *Store, d Digest) int64 {
	t.Helper()
	fi, err := os.Stat(s.objectPath(d))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}
