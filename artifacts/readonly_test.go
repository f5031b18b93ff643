package artifacts

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

// roFixture is what TestReadOnlyStore stored before making the store read-only, for the checks
// (which may run in a child process: TestHelperReadOnlyStore).
type roFixture struct {
	Dir      string       `json:"dir"`
	Pack     Object       `json:"pack"`     // stored, with an action record, a pin and a digests record
	Other    Object       `json:"other"`    // stored, no digests record
	Corrupt  Object       `json:"corrupt"`  // stored, then damaged on disk
	Record   ActionRecord `json:"record"`   // the record of Pack
	Invalid  Digest       `json:"invalid"`  // key of a damaged action record
	Hashed   string       `json:"hashed"`   // a user file in the stat cache (Pack's bytes)
	Unhashed string       `json:"unhashed"` // a user file not in it
	Out      string       `json:"out"`      // where Pack was materialized
	Scratch  string       `json:"scratch"`  // a writable directory outside the store
}

// makeROFixture builds a store at dir with every kind of entry, as normal builds would leave it.
func makeROFixture(t *testing.T, dir string) roFixture {
	t.Helper()
	ctx := context.Background()
	user := t.TempDir()
	fx := roFixture{Dir: dir, Hashed: filepath.Join(user, "hashed.bin"), Unhashed: filepath.Join(user, "unhashed.bin"),
		Out: filepath.Join(user, "out", "model.orkpack"), Scratch: t.TempDir()}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pack := pattern("pack", 300000)
	fx.Pack = mustIngest(t, s, pack)
	fx.Other = mustIngest(t, s, pattern("other", 5000))
	fx.Corrupt = mustIngest(t, s, pattern("corrupt", 7000))
	flipByte(t, s, fx.Corrupt.Digest, 100)
	fx.Record = ActionRecord{Key: SumBytes([]byte("node")), Stage: "tile", Version: 1,
		Outputs: []NamedObject{{Name: "pack", Digest: fx.Pack.Digest, Size: fx.Pack.Size}}}
	if err := s.PutAction(ctx, fx.Record); err != nil {
		t.Fatal(err)
	}
	bad := fx.Record
	bad.Key = SumBytes([]byte("damaged node"))
	if err := s.PutAction(ctx, bad); err != nil {
		t.Fatal(err)
	}
	fx.Invalid = bad.Key
	if err := os.WriteFile(s.actionPath(bad.Key), []byte(`{"key": "cut short`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Pin(ctx, "target", []Digest{fx.Pack.Digest}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Digests(ctx, fx.Pack.Digest); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Materialize(ctx, fx.Pack.Digest, fx.Out, MaterializeOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fx.Hashed, fx.Unhashed} {
		if err := os.WriteFile(p, pack, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	settle()
	if _, err := s.HashFile(ctx, fx.Hashed); err != nil {
		t.Fatal(err)
	}
	return fx
}

// A store built normally and then made read-only — a read-only bind mount (root), a directory tree
// without write permission (other users), or only opened read-only — serves every read as before:
// objects, records, the stat cache, digests records, materialized paths, usage and verification (a
// corrupt object and an invalid record are reported, not quarantined). Every write fails with
// ErrReadOnly naming the directory, and nothing under it changes. OpenStore refused such a cache
// outright (it creates its layout, store.lock and a temp session).
func TestReadOnlyStore(t *testing.T) {
	t.Run("opened read-only", func(t *testing.T) {
		fx := makeROFixture(t, filepath.Join(t.TempDir(), "cache"))
		before := testfiles.Tree(t, fx.Dir)
		if err := Writable(fx.Dir); err != nil {
			t.Fatalf("Writable of a writable cache: %v", err)
		}
		checkReadOnlyStore(t, fx)
		testfiles.SameTree(t, before, testfiles.Tree(t, fx.Dir))
	})
	t.Run("not writable", func(t *testing.T) {
		fx := makeROFixture(t, filepath.Join(t.TempDir(), "cache"))
		if os.Geteuid() != 0 {
			// Not root: permissions bind this process.
			testfiles.DenyWrites(t, fx.Dir)
			before := testfiles.Tree(t, fx.Dir)
			checkUnwritable(t, fx)
			testfiles.SameTree(t, before, testfiles.Tree(t, fx.Dir))
			return
		}
		// Root writes through any permission: a read-only bind mount of the store, in a child's
		// mount namespace of its own (testfiles.InReadOnlyMount).
		before := testfiles.Tree(t, fx.Dir)
		testfiles.InReadOnlyMount(t, "TestHelperReadOnlyStore", fx.Dir, fx)
		testfiles.SameTree(t, before, testfiles.Tree(t, fx.Dir))
	})
}

// checkUnwritable checks a store this process cannot write: OpenStore fails, Writable says why, and
// OpenStoreReadOnly serves it (checkReadOnlyStore).
func checkUnwritable(t *testing.T, fx roFixture) {
	t.Helper()
	if s, err := OpenStore(fx.Dir); err == nil {
		s.Close()
		t.Fatalf("OpenStore of a cache this process cannot write succeeded")
	}
	if err := Writable(fx.Dir); err == nil || !strings.Contains(err.Error(), fx.Dir) {
		t.Fatalf("Writable of a cache this process cannot write: %v", err)
	}
	checkReadOnlyStore(t, fx)
}

// checkReadOnlyStore opens fx's store read-only and checks every read and every write.
func checkReadOnlyStore(t *testing.T, fx roFixture) {
	t.Helper()
	ctx := context.Background()
	s, err := OpenStoreReadOnly(fx.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.ReadOnly() {
		t.Fatal("ReadOnly() is false")
	}
	// Reads.
	if o, err := s.Stat(ctx, fx.Pack.Digest); err != nil || o != fx.Pack {
		t.Fatalf("Stat: %v, %v", o, err)
	}
	if got, err := readAll(t, s, fx.Pack.Digest); err != nil || !bytes.Equal(got, pattern("pack", 300000)) {
		t.Fatalf("Open: %d bytes, %v", len(got), err)
	}
	if err := s.Verify(ctx, fx.Pack.Digest); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rec, err := s.GetAction(ctx, fx.Record.Key); err != nil || rec.Outputs[0].Digest != fx.Pack.Digest {
		t.Fatalf("GetAction: %v, %v", rec, err)
	}
	if _, err := s.GetAction(ctx, fx.Invalid); !errors.Is(err, ErrInvalidRecord) || !strings.Contains(err.Error(), "not quarantined: the cache is opened read-only") {
		t.Fatalf("GetAction of the damaged record: %v, want ErrInvalidRecord saying it was not quarantined", err)
	}
	if o, err := s.HashFile(ctx, fx.Hashed); err != nil || o != fx.Pack || s.hashes.load() != 0 {
		t.Fatalf("HashFile of a file in the stat cache: %v, %v, %d hashes", o, err, s.hashes.load())
	}
	if o, err := s.HashFile(ctx, fx.Unhashed); err != nil || o != fx.Pack || s.hashes.load() != 1 {
		t.Fatalf("HashFile of a file not in the stat cache: %v, %v, %d hashes", o, err, s.hashes.load())
	}
	if _, err := s.Digests(ctx, fx.Pack.Digest); err != nil || s.digestHashes.load() != 0 {
		t.Fatalf("Digests from its record: %v, %d hashes", err, s.digestHashes.load())
	}
	if od, err := s.Digests(ctx, fx.Other.Digest); err != nil || od.Object != fx.Other {
		t.Fatalf("Digests without a record: %v, %v", od, err)
	}
	if !s.InPlace(ctx, fx.Pack.Digest, fx.Out) {
		t.Fatal("InPlace of the materialized pack is false")
	}
	if u, err := s.Usage(ctx, nil, nil); err != nil || u.Objects != 3 || u.Pinned != 1 {
		t.Fatalf("Usage: %+v, %v", u, err)
	}
	rep, err := s.VerifyAll(ctx)
	if err != nil || len(rep.Corrupt) != 1 || rep.Corrupt[0].Digest != fx.Corrupt.Digest || !strings.Contains(rep.Corrupt[0].Error, "not quarantined") {
		t.Fatalf("VerifyAll: %+v, %v; want the damaged object reported, not quarantined", rep, err)
	}
	// Writes.
	materialized := filepath.Join(fx.Scratch, "m.bin")
	adoptable := filepath.Join(fx.Scratch, "adopt.bin")
	if err := os.WriteFile(adoptable, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, write := range map[string]func() error{
		"Ingest":       func() error { _, err := s.Ingest(ctx, strings.NewReader("new")); return err },
		"IngestExpect": func() error { _, err := s.IngestExpect(ctx, strings.NewReader("new"), fx.Other); return err },
		"IngestFile":   func() error { _, err := s.IngestFile(ctx, fx.Unhashed); return err },
		"AdoptFile":    func() error { _, err := s.AdoptFile(ctx, adoptable); return err },
		"PutAction":    func() error { return s.PutAction(ctx, fx.Record) },
		"Pin":          func() error { return s.Pin(ctx, "target", nil) },
		"LockKey":      func() error { _, err := s.LockKey(ctx, fx.Record.Key); return err },
		"TempDir":      func() error { _, err := s.TempDir(ctx); return err },
		"GC":           func() error { _, err := s.GC(ctx, GCOptions{MaxSize: 1}); return err },
		"Materialize": func() error {
			_, err := s.Materialize(ctx, fx.Pack.Digest, materialized, MaterializeOptions{})
			return err
		},
	} {
		err := write()
		if !errors.Is(err, ErrReadOnly) || !strings.Contains(err.Error(), fx.Dir) || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("%s on a read-only store: %v; want ErrReadOnly naming %s", name, err, fx.Dir)
		}
	}
	if _, err := os.Lstat(materialized); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Materialize on a read-only store wrote %s: %v", materialized, err)
	}
	// What the reads found is still there: the damaged object and record were not moved.
	for _, p := range []string{s.objectPath(fx.Corrupt.Digest), s.actionPath(fx.Invalid)} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHelperReadOnlyStore is not a test: TestReadOnlyStore runs it in a child process whose mount
// namespace has the store bind-mounted read-only over itself (testfiles.InReadOnlyMount).
func TestHelperReadOnlyStore(t *testing.T) {
	var fx roFixture
	if testfiles.ReadOnlyMountChild(t, "TestReadOnlyStore", &fx) {
		checkUnwritable(t, fx)
	}
}
