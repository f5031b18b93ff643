package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/stages"
)

func TestCacheDir(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "c")
	out, _, code := orkpipeExit(t, "--cache", cache, "cache", "dir")
	if code != 0 || out != cache+"\n" {
		t.Fatalf("cache dir: exit %d, %q", code, out)
	}
}

// fillCache stores n 1000-byte objects used 1..n hours ago (object 0 the oldest).
func fillCache(t *testing.T, cache string, n int) []artifacts.Object {
	t.Helper()
	s, err := artifacts.OpenStore(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var objs []artifacts.Object
	for i := range n {
		o, err := s.Ingest(context.Background(), bytes.NewReader(bytes.Repeat([]byte{byte(i + 1)}, 1000)))
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-time.Duration(n-i) * time.Hour)
		for _, p := range []string{
			filepath.Join(cache, "access", o.Digest.Hex()[:2], o.Digest.Hex()),
			filepath.Join(cache, "objects", o.Digest.Hex()[:2], o.Digest.Hex()),
		} {
			if err := os.Chtimes(p, at, at); err != nil {
				t.Fatal(err)
			}
		}
		objs = append(objs, o)
	}
	return objs
}

func TestCacheVerify(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "c")
	objs := fillCache(t, cache, 3)
	out, errOut, code := orkpipeExit(t, "--cache", cache, "cache", "verify")
	if code != 0 || !strings.Contains(out, "verified 3 objects") || !strings.Contains(out, "0 corrupt") {
		t.Fatalf("clean verify: exit %d, %q %q", code, out, errOut)
	}
	// Corrupt one object on disk.
	p := filepath.Join(cache, "objects", objs[1].Digest.Hex()[:2], objs[1].Digest.Hex())
	os.Chmod(p, 0o644)
	os.WriteFile(p, bytes.Repeat([]byte{9}, 1000), 0o644)
	out, errOut, code = orkpipeExit(t, "--cache", cache, "cache", "verify")
	if code != 1 || !strings.Contains(out, "CORRUPT "+objs[1].Digest.String()) || !strings.Contains(errOut, "1 corrupt objects quarantined") {
		t.Fatalf("verify with a corrupt object: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("corrupt object still in objects/: %v", err)
	}
	out, _, code = orkpipeExit(t, "--cache", cache, "cache", "verify")
	if code != 0 || !strings.Contains(out, "verified 2 objects") {
		t.Fatalf("verify after quarantine: exit %d, %q", code, out)
	}
}

func TestCacheGC(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "c")
	objs := fillCache(t, cache, 4)
	s, err := artifacts.OpenStore(cache)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pin(context.Background(), "recipe", []artifacts.Digest{objs[0].Digest}); err != nil {
		t.Fatal(err)
	}
	// While another process (here: Store) has the cache open, gc refuses.
	_, errOut, code := orkpipeExit(t, "--cache", cache, "cache", "gc", "--max-size", "2000B")
	if code != 1 || !strings.Contains(errOut, "cache in use") {
		t.Fatalf("gc on a busy cache: exit %d, %q", code, errOut)
	}
	s.Close()
	// Pin touched object 0; age it again so only the pin protects it.
	at := time.Now().Add(-10 * time.Hour)
	os.Chtimes(filepath.Join(cache, "access", objs[0].Digest.Hex()[:2], objs[0].Digest.Hex()), at, at)

	out, errOut, code := orkpipeExit(t, "--cache", cache, "cache", "gc", "--max-size", "2000B")
	if code != 0 || !strings.Contains(out, "removed 2 of 4 objects") || !strings.Contains(out, "pinned 1") {
		t.Fatalf("gc: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	s, err = artifacts.OpenStore(cache)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, wantKept := range []bool{true, false, false, true} { // pinned, LRU, LRU, most recent
		_, err := s.Stat(context.Background(), objs[i].Digest)
		if (err == nil) != wantKept {
			t.Errorf("object %d: kept=%v, want %v", i, err == nil, wantKept)
		}
	}
	for _, args := range [][]string{
		{"cache", "gc"},
		{"cache", "gc", "--max-size", "lots"},
		{"cache", "gc", "--max-age", "-3h"},
	} {
		if _, _, code := orkpipeExit(t, append([]string{"--cache", cache}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// TestCacheDu: after a build, du lists the build's stages with the disk their outputs take, the
// exports pinned, the stages summing to the total; an older orkpipe's record and output are what gc
// --outdated frees, and removes; after gc --max-size 1 only the pins are left.
func TestCacheDu(t *testing.T) {
	dir := t.TempDir()
	recipe, _, _ := tinyRecipe(t, dir)
	cache := filepath.Join(dir, "cache")
	if _, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", filepath.Join(dir, "out")); code != 0 {
		t.Fatalf("build: exit %d: %s", code, stderr)
	}
	du := func() artifacts.UsageReport { t.Helper(); return cacheDu(t, cache) }
	rep := du()
	stages := map[string]artifacts.StageUsage{}
	var objects int
	var disk int64
	for _, u := range rep.Stages {
		stages[u.Stage] = u
		objects += u.Objects
		disk += u.Disk
	}
	for _, st := range []string{"synth", "tokenize", "calibrate", "finalize", "tile", "write-orkpack", "emit-stub", "report"} {
		if stages[st].Objects == 0 || stages[st].Disk <= 0 {
			t.Errorf("stage %s: %+v, want its outputs", st, stages[st])
		}
	}
	if pk := stages["write-orkpack"]; pk.PinnedDisk != pk.Disk {
		t.Errorf("the pack is not pinned: %+v", pk)
	}
	if objects != rep.Objects || disk != rep.Disk || rep.PinnedDisk <= 0 || rep.PinnedDisk >= rep.Disk {
		t.Errorf("report %+v: stages sum to %d objects, %d bytes on disk", rep, objects, disk)
	}
	text, _, code := demoCLI(t, "--cache", cache, "cache", "du")
	if code != 0 || !strings.Contains(text, "\ncalibrate ") || !strings.Contains(text, cache+": ") || !strings.Contains(text, "gc --max-size can free") {
		t.Errorf("cache du: exit %d:\n%s", code, text)
	}
	if rep.OutdatedDisk != 0 {
		t.Errorf("a fresh build's cache: outdated_disk %d, want 0", rep.OutdatedDisk)
	}

	// An older orkpipe's finalize output (a record of the version before this binary's): du says gc
	// --outdated frees it, gc --outdated removes it and its record, and the build still runs nothing.
	s, err := artifacts.OpenStore(cache)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old, err := s.Ingest(ctx, strings.NewReader(strings.Repeat("an older finalize's weight ", 4000)))
	if err != nil {
		t.Fatal(err)
	}
	fin, err := stageVersion("finalize")
	if err != nil {
		t.Fatal(err)
	}
	oldRec := artifacts.ActionRecord{Key: artifacts.SumBytes([]byte("older")), Stage: "finalize", Version: fin - 1,
		Outputs: []artifacts.NamedObject{{Name: "weight", Digest: old.Digest, Size: old.Size}}}
	if err := s.PutAction(ctx, oldRec); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := du(); got.OutdatedDisk <= 0 || got.OutdatedDisk >= got.Disk || got.Disk <= rep.Disk {
		t.Errorf("with an older finalize's record: outdated_disk %d of %d on disk, want that object's blocks", got.OutdatedDisk, got.Disk)
	}
	text, _, _ = demoCLI(t, "--cache", cache, "cache", "du")
	if !strings.Contains(text, ", gc --outdated ") {
		t.Errorf("cache du: no gc --outdated figure:\n%s", text)
	}
	gcText, stderr, code := demoCLI(t, "--cache", cache, "cache", "gc", "--outdated")
	if code != 0 || !strings.Contains(gcText, "removed 1 of ") || !strings.Contains(gcText, "(1 outdated)") {
		t.Fatalf("cache gc --outdated: exit %d: %s%s", code, gcText, stderr)
	}
	if got := du(); got.Disk != rep.Disk || got.OutdatedDisk != 0 {
		t.Errorf("after gc --outdated: %d on disk (outdated %d), want the build's %d", got.Disk, got.OutdatedDisk, rep.Disk)
	}
	if out, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", filepath.Join(dir, "out")); code != 0 || !strings.Contains(out+stderr, "executed 0,") {
		t.Errorf("rebuild after gc --outdated: exit %d, want nothing executed:\n%s%s", code, out, stderr)
	}

	if _, stderr, code := demoCLI(t, "--cache", cache, "cache", "gc", "--max-size", "1"); code != 0 {
		t.Fatalf("cache gc: exit %d: %s", code, stderr)
	}
	if after := du(); after.Disk != rep.PinnedDisk || after.PinnedDisk != rep.PinnedDisk {
		t.Errorf("after gc --max-size 1: %+v, want only the %d pinned bytes", after, rep.PinnedDisk)
	}
}

// cacheDu is `orkpipe cache du --json` of cache.
func cacheDu(t *testing.T, cache string) artifacts.UsageReport {
	t.Helper()
	stdout, stderr, code := demoCLI(t, "--cache", cache, "--json", "cache", "du")
	if code != 0 {
		t.Fatalf("cache du: exit %d: %s", code, stderr)
	}
	var rep artifacts.UsageReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// stageVersion is the version of the stage kind name that this binary runs.
func stageVersion(name string) (int, error) {
	k, err := stages.Lookup(name)
	if err != nil {
		return 0, err
	}
	return k.Version(), nil
}

// TestCacheGCDownstream: an older orkpipe's finalize record whose output this binary's record of the
// weight names too (a rebuild made the same bytes) is dropped alone. One that is the only record of
// its weight (the build's own, its version set back) strands what was built from its weight: du
// counts the unpinned objects downstream, gc --outdated drops the record and every record
// downstream of it (the weight's tile, the pack, what read the pack) and removes their unpinned
// objects, and the next build runs exactly the nodes of the dropped records again, to the same pack
// and stub.
func TestCacheGCDownstream(t *testing.T) {
	dir := t.TempDir()
	recipe, _, _ := tinyRecipe(t, dir)
	cache := filepath.Join(dir, "cache")
	out := filepath.Join(dir, "out")
	build := func() string {
		t.Helper()
		stdout, stderr, code := demoCLI(t, "--cache", cache, "--mem", "2GiB", "build", recipe, "-o", out, "--force")
		if code != 0 {
			t.Fatalf("build: exit %d: %s", code, stderr)
		}
		return stdout + stderr
	}
	build()
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	packBefore, stubBefore := read("clitiny.orkpack"), read("clitiny.orkpack.gguf")
	du := func() artifacts.UsageReport { t.Helper(); return cacheDu(t, cache) }
	if rep := du(); rep.OutdatedDisk != 0 {
		t.Fatalf("a fresh build's cache: outdated_disk %d, want 0", rep.OutdatedDisk)
	}

	ctx := context.Background()
	recs, err := engine.History(ctx, engine.HistoryDir(cache), "clitiny", 1)
	if err != nil {
		t.Fatal(err)
	}
	var key artifacts.Digest
	for _, n := range recs[0].Nodes {
		if n.Stage == "finalize" && strings.HasSuffix(n.ID, "ffn_down.weight") {
			if key, err = artifacts.ParseDigest(n.Key); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	s, err := artifacts.OpenStore(cache)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.GetAction(ctx, key)
	if err != nil {
		t.Fatalf("the ffn_down finalize's record (%s): %v", key, err)
	}
	rec.Version--
	// After a rebuild: an older orkpipe's record of that weight under its own key, whose output this
	// binary's record names too (the new version made the same bytes). gc drops that record alone.
	older := rec
	older.Key = artifacts.SumBytes([]byte("an older orkpipe's key of " + key.String()))
	if err := s.PutAction(ctx, older); err != nil {
		t.Fatal(err)
	}
	s.Close()
	var gc artifacts.GCReport
	gcOutdated := func() {
		t.Helper()
		stdout, stderr, code := demoCLI(t, "--cache", cache, "--json", "cache", "gc", "--outdated")
		if code != 0 {
			t.Fatalf("cache gc --outdated: exit %d: %s", code, stderr)
		}
		gc = artifacts.GCReport{}
		if err := json.Unmarshal([]byte(stdout), &gc); err != nil {
			t.Fatal(err)
		}
	}
	gcOutdated()
	if gc.Outdated != 1 || gc.Downstream != 0 || gc.Removed != 0 {
		t.Errorf("gc --outdated after a rebuild: %+v; want the older record alone dropped", gc)
	}
	if log := build(); !strings.Contains(log, "executed 0,") {
		t.Errorf("build after gc --outdated: want nothing executed:\n%s", log)
	}

	// Before a rebuild: the build's own record set back a version, as if an older orkpipe had left it.
	if s, err = artifacts.OpenStore(cache); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAction(ctx, rec); err != nil {
		t.Fatal(err)
	}
	s.Close()

	rep := du()
	if rep.OutdatedDisk <= 0 {
		t.Fatalf("with an older finalize's record: outdated_disk %d", rep.OutdatedDisk)
	}
	stage := map[string]artifacts.StageUsage{}
	for _, u := range rep.Stages {
		stage[u.Stage] = u
	}
	for _, st := range []string{"finalize", "tile"} {
		if stage[st].OutdatedDisk <= 0 {
			t.Errorf("du: stage %s frees nothing under --outdated: %+v", st, stage[st])
		}
	}
	if pk := stage["write-orkpack"]; pk.OutdatedDisk != 0 {
		t.Errorf("du: the pinned pack counted as freed: %+v", pk)
	}
	gcOutdated()
	t.Logf("gc --outdated: %+v", gc)
	if gc.Downstream < 3 || gc.Outdated != gc.Downstream+1 || gc.Removed < 2 {
		t.Fatalf("gc --outdated: %+v; want the record, its tile's, the pack's and more downstream dropped", gc)
	}
	if after := du(); after.OutdatedDisk != 0 || after.Disk != rep.Disk-rep.OutdatedDisk {
		t.Errorf("after gc: %d on disk (outdated %d), want %d - %d", after.Disk, after.OutdatedDisk, rep.Disk, rep.OutdatedDisk)
	}
	log := build()
	if want := fmt.Sprintf("executed %d,", gc.Outdated); !strings.Contains(log, want) {
		t.Errorf("rebuild after gc: want %q (the dropped records' nodes, no other):\n%s", want, log)
	}
	if !bytes.Equal(read("clitiny.orkpack"), packBefore) || !bytes.Equal(read("clitiny.orkpack.gguf"), stubBefore) {
		t.Error("the rebuilt pack or stub differs from the first build's")
	}
}
