package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// digestsFile writes a file of size bytes with data in every other 3 MiB run and holes between
// (sparse when hole is true) and returns its logical bytes.
func digestsFile(t *testing.T, path string, size int, hole bool) []byte {
	t.Helper()
	want := make([]byte, size)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	run := 3 << 20
	for off := 0; off < size; off += run {
		end := min(off+run, size)
		if hole && (off/run)%2 == 1 {
			continue
		}
		copy(want[off:end], pattern(path+string(rune(off)), end-off))
		if _, err := f.WriteAt(want[off:end], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// checkDigests compares od with the digests of b computed independently.
func checkDigests(t *testing.T, what string, od ObjectDigests, b []byte) {
	t.Helper()
	if od.Digest != SumBytes(b) || od.Size != int64(len(b)) || od.SHA256 != sha256.Sum256(b) {
		t.Errorf("%s: digests %s %d %x, want %s %d %x", what, od.Digest, od.Size, od.SHA256, SumBytes(b), len(b), sha256.Sum256(b))
	}
	if len(b) <= PieceSize {
		if od.Pieces != nil {
			t.Errorf("%s: %d piece values for a one-piece object", what, len(od.Pieces))
		}
		return
	}
	if n := (len(b) + PieceSize - 1) / PieceSize; len(od.Pieces) != n {
		t.Fatalf("%s: %d piece values, want %d", what, len(od.Pieces), n)
	}
	for i := range od.Pieces {
		off := i * PieceSize
		if od.Pieces[i] != SubtreeCV(b[off:min(off+PieceSize, len(b))], uint64(off/ChunkSize)) {
			t.Errorf("%s: piece %d differs", what, i)
		}
	}
}

// TestHashDigests hashes files of every size class, dense and sparse, in one read and compares
// sha256, BLAKE3 and the piece values with independent computations.
func TestHashDigests(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		size   int
		sparse bool
	}{{0, false}, {1000, false}, {PieceSize, false}, {PieceSize + 1, false}, {3*PieceSize + 12345, false}, {7*PieceSize + 99, true}, {16 * PieceSize, true}} {
		p := filepath.Join(dir, "f")
		want := digestsFile(t, p, c.size, c.sparse)
		od, err := HashDigests(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		checkDigests(t, p, od, want)
		if err := od.check(); err != nil {
			t.Errorf("%d bytes: %v", c.size, err)
		}
	}
}

// TestDigestsRemembered: Digests hashes a stored object once and then reads its record (also from
// another Store on the same directory); FileDigests of a materialized output hashes nothing.
func TestDigestsRemembered(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	src := filepath.Join(t.TempDir(), "stub.gguf")
	want := digestsFile(t, src, 5*PieceSize+7, true)
	obj, err := s.IngestFile(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		od, err := s.Digests(ctx, obj.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkDigests(t, "Digests", od, want)
	}
	if n := s.digestHashes.load(); n != 1 {
		t.Fatalf("%d hashes for two Digests calls, want 1", n)
	}
	s2, err := OpenStore(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Digests(ctx, obj.Digest); err != nil || s2.digestHashes.load() != 0 {
		t.Fatalf("second store: %v, %d hashes", err, s2.digestHashes.load())
	}
	out := filepath.Join(t.TempDir(), "out", "stub.gguf")
	if _, err := s.Materialize(ctx, obj.Digest, out, MaterializeOptions{}); err != nil {
		t.Fatal(err)
	}
	// The journal names the output's identity as it is after Materialize returned (the temp link
	// it made is gone before the journal is written).
	var st unix.Stat_t
	if err := unix.Lstat(out, &st); err != nil {
		t.Fatal(err)
	}
	if e, ok := s.readJournal(s.keyPath("journal", out), out); !ok || e.ID != idOf(&st) {
		t.Errorf("journal entry %+v does not match the materialized file %+v", e.ID, idOf(&st))
	}
	before := s.hashes.load()
	od, err := s.FileDigests(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	checkDigests(t, "FileDigests", od, want)
	if n := s.hashes.load() - before; n != 0 {
		t.Errorf("FileDigests of a materialized output hashed it %d times", n)
	}
}

// TestFileDigestsUnknownFile: a file the store does not know is hashed once (one read, both
// digests), then known by the stat cache; if its bytes are a stored object, its digests are
// remembered beside it. A changed file is hashed again.
func TestFileDigestsUnknownFile(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	p := filepath.Join(t.TempDir(), "pack")
	want := digestsFile(t, p, 2*PieceSize+3, false)
	settle()
	od, err := s.FileDigests(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	checkDigests(t, "first", od, want)
	if _, err := os.Stat(s.digestsPath(od.Digest)); !os.IsNotExist(err) {
		t.Errorf("digests remembered for an object the store does not hold (%v)", err)
	}
	mustIngest(t, s, want)
	if od, err = s.FileDigests(ctx, p); err != nil {
		t.Fatal(err)
	}
	checkDigests(t, "stored", od, want)
	if _, err := os.Stat(s.digestsPath(od.Digest)); err != nil {
		t.Errorf("digests not remembered once the store holds the bytes: %v", err)
	}
	n, m := s.hashes.load(), s.digestHashes.load()
	if _, err := s.FileDigests(ctx, p); err != nil || s.hashes.load() != n || s.digestHashes.load() != m {
		t.Errorf("third call: %v, %d file hashes (was %d), %d object hashes (was %d)", err, s.hashes.load(), n, s.digestHashes.load(), m)
	}
	want[5] ^= 1
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if od, err = s.FileDigests(ctx, p); err != nil {
		t.Fatal(err)
	}
	checkDigests(t, "changed", od, want)
}

// TestDigestsRecordGuards: a damaged record (bad checksum, piece values that do not merge into the
// name, a record for another size) is dropped and recomputed; a corrupt object is quarantined with
// its record; GC removes a record with its object.
func TestDigestsRecordGuards(t *testing.T) {
	ctx := context.Background()
	s := openTestStore(t)
	b := pattern("guards", 3*PieceSize+100)
	obj := mustIngest(t, s, b)
	od, err := s.Digests(ctx, obj.Digest)
	if err != nil {
		t.Fatal(err)
	}
	rec := s.digestsPath(obj.Digest)
	good, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	reencode := func(mod func(*ObjectDigests)) []byte {
		o := od
		o.Pieces = append([]ChainValue(nil), od.Pieces...)
		mod(&o)
		e, err := encodeDigests(o)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, c := range []struct {
		name string
		rec  []byte
	}{
		{"sha256 edited, checksum stale", bytes.Replace(good, []byte(od.SHA256String()[7:15]), []byte("00000000"), 1)},
		{"truncated", good[:len(good)/2]},
		{"pieces swapped, checksum recomputed", reencode(func(o *ObjectDigests) { o.Pieces[0], o.Pieces[1] = o.Pieces[1], o.Pieces[0] })},
		{"wrong size, checksum recomputed", reencode(func(o *ObjectDigests) { o.Size++ })},
		{"unknown field", []byte(strings.Replace(string(good), `"size"`, `"extra":1,"size"`, 1))},
	} {
		if err := os.WriteFile(rec, c.rec, 0o644); err != nil {
			t.Fatal(err)
		}
		before := s.digestHashes.load()
		got, err := s.Digests(ctx, obj.Digest)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		checkDigests(t, c.name, got, b)
		if s.digestHashes.load() != before+1 {
			t.Errorf("%s: record trusted (no re-hash)", c.name)
		}
	}
	// A corrupt object: Digests finds it (the read checks the name), quarantines it, and the
	// record goes with it.
	flipByte(t, s, obj.Digest, 5)
	os.Remove(rec)
	if _, err := s.Digests(ctx, obj.Digest); err == nil {
		t.Fatal("Digests of a corrupt object: no error")
	} else {
		wantErrIs(t, err, ErrCorrupt)
	}
	if _, err := os.Stat(rec); !os.IsNotExist(err) {
		t.Errorf("record of a quarantined object left behind (%v)", err)
	}
	// GC removes the record with the object.
	obj2 := mustIngest(t, s, pattern("gc", PieceSize+5))
	if _, err := s.Digests(ctx, obj2.Digest); err != nil {
		t.Fatal(err)
	}
	used(t, s, obj2.Digest, time.Now().Add(-48*time.Hour))
	if _, err := s.GC(ctx, GCOptions{MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.digestsPath(obj2.Digest)); !os.IsNotExist(err) {
		t.Errorf("record of a collected object left behind (%v)", err)
	}
}
