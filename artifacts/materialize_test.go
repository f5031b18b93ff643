package artifacts

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"orkpipe/internal/testfiles"
)

func TestMaterializeNoClobber(t *testing.T) {
	for _, copyMode := range []bool{false, true} {
		name := "hardlink"
		if copyMode {
			name = "copy"
		}
		t.Run(name, func(t *testing.T) {
			s := openTestStore(t)
			s.forceCopy = copyMode
			ctx := context.Background()
			pack := pattern("pack", 300000)
			o := mustIngest(t, s, pack)
			out := t.TempDir()

			// A fresh path: written read-only, linked or copied as requested.
			dst := filepath.Join(out, "model.orkpack")
			res, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Linked == copyMode || res.Replaced != "" || res.Path != dst {
				t.Fatalf("result %+v", res)
			}
			checkFile(t, dst, pack, 0o444)

			// Materializing again over orkpipe's own unchanged file is fine.
			if _, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{}); err != nil {
				t.Fatal(err)
			}
			// Even a different object may replace an unchanged file orkpipe wrote.
			o2 := mustIngest(t, s, pattern("pack v2", 300000))
			if res, err := s.Materialize(ctx, o2.Digest, dst, MaterializeOptions{}); err != nil || res.Replaced != "" {
				t.Fatalf("replacing orkpipe's own file: %+v, %v", res, err)
			}

			// A user file orkpipe did not write: refused, untouched; Force replaces and says so.
			user := filepath.Join(out, "notes.orkpack")
			mine := []byte("the user's own pack, do not lose")
			os.WriteFile(user, mine, 0o644)
			_, err = s.Materialize(ctx, o.Digest, user, MaterializeOptions{})
			wantErrIs(t, err, ErrClobber)
			if !strings.Contains(err.Error(), user) || !strings.Contains(err.Error(), "did not write") {
				t.Fatalf("clobber error %q does not name the path and the reason", err)
			}
			checkFile(t, user, mine, 0o644)
			res, err = s.Materialize(ctx, o.Digest, user, MaterializeOptions{Force: true})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(res.Replaced, user) || !strings.Contains(res.Replaced, "did not write") {
				t.Fatalf("Force result %+v does not say what it replaced", res)
			}
			checkFile(t, user, pack, 0o444)
		})
	}
}

func TestMaterializeChangedSinceWritten(t *testing.T) {
	s := openTestStore(t)
	s.forceCopy = true // a copy, so the user's edit does not reach the object
	ctx := context.Background()
	pack := pattern("pack", 100000)
	o := mustIngest(t, s, pack)
	dst := filepath.Join(t.TempDir(), "model.orkpack")
	if _, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{}); err != nil {
		t.Fatal(err)
	}
	// The user edits the file orkpipe wrote (same size).
	os.Chmod(dst, 0o644)
	edited := append([]byte{}, pack...)
	edited[10] ^= 0xff
	if err := os.WriteFile(dst, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{})
	wantErrIs(t, err, ErrClobber)
	if !strings.Contains(err.Error(), "changed since") || !strings.Contains(err.Error(), dst) {
		t.Fatalf("error %q", err)
	}
	checkFile(t, dst, edited, 0o644)
	res, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{Force: true})
	if err != nil || !strings.Contains(res.Replaced, "changed since") {
		t.Fatalf("Force: %+v, %v", res, err)
	}
	checkFile(t, dst, pack, 0o444)
}

func TestMaterializeHardlinkSharedCtime(t *testing.T) {
	// Hard links share the object's inode: linking it elsewhere changes its ctime. That must not
	// make orkpipe's own unchanged file look "changed by the user".
	s := openTestStore(t)
	ctx := context.Background()
	o := mustIngest(t, s, pattern("shared", 5000))
	out := t.TempDir()
	a, b := filepath.Join(out, "a"), filepath.Join(out, "b")
	for _, p := range []string{a, b} {
		if _, err := s.Materialize(ctx, o.Digest, p, MaterializeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	o2 := mustIngest(t, s, pattern("other", 5000))
	if res, err := s.Materialize(ctx, o2.Digest, a, MaterializeOptions{}); err != nil || res.Replaced != "" {
		t.Fatalf("replacing orkpipe's own hardlinked file: %+v, %v", res, err)
	}
}

func TestSparseStaysSparse(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	dir := t.TempDir()
	// A stub-like file: 256 MiB logical, 1 MiB of data at the start, 1 MiB in the middle.
	const logical = 256 << 20
	src := filepath.Join(dir, "stub.gguf")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	head, mid := pattern("header", 1<<20), pattern("middle", 1<<20)
	f.WriteAt(head, 0)
	f.WriteAt(mid, 128<<20)
	f.Truncate(logical)
	f.Close()
	if du := testfiles.Allocated(t, src); du > 4<<20 {
		testfiles.Need(t, "the test filesystem does not make holes (%d bytes on disk)", du)
	}
	want, err := HashPath(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	full := make([]byte, logical)
	copy(full, head)
	copy(full[128<<20:], mid)
	if SumBytes(full) != want.Digest {
		t.Fatal("HashPath of a sparse file differs from the hash of its logical bytes")
	}
	full = nil

	o, err := s.IngestFile(ctx, src)
	if err != nil || o != want {
		t.Fatalf("IngestFile = %v, %v; want %v", o, err, want)
	}
	if du := testfiles.Allocated(t, s.objectPath(o.Digest)); du > 4<<20 {
		t.Fatalf("ingested object uses %d bytes on disk for %d logical bytes", du, int64(logical))
	}
	s.forceCopy = true
	dst := filepath.Join(dir, "out", "stub.gguf")
	res, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{})
	if err != nil || res.Linked {
		t.Fatalf("Materialize copy: %+v, %v", res, err)
	}
	if du := testfiles.Allocated(t, dst); du > 4<<20 {
		t.Fatalf("materialized copy uses %d bytes on disk for %d logical bytes", du, int64(logical))
	}
	if got, err := HashPath(ctx, dst); err != nil || got != want {
		t.Fatalf("materialized copy hashes to %v, %v", got, err)
	}
	// The same bytes as a plain stream through Ingest (a download) also land sparse.
	s2 := openTestStore(t)
	r, _ := os.Open(src)
	defer r.Close()
	o3, err := s2.Ingest(ctx, struct{ io.Reader }{r}) // hide ReadAt/Seek: a plain stream
	if err != nil || o3 != want {
		t.Fatalf("Ingest of the stream = %v, %v", o3, err)
	}
	if du := testfiles.Allocated(t, s2.objectPath(o3.Digest)); du > 4<<20 {
		t.Fatalf("streamed object uses %d bytes on disk for %d logical bytes", du, int64(logical))
	}
	t.Logf("%d logical bytes; on disk: source %d, ingested %d, materialized copy %d, streamed %d",
		int64(logical), testfiles.Allocated(t, src), testfiles.Allocated(t, s.objectPath(o.Digest)), testfiles.Allocated(t, dst), testfiles.Allocated(t, s2.objectPath(o3.Digest)))
}

func checkFile(t *testing.T, p string, want []byte, mode os.FileMode) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: content differs (%d bytes, want %d)", p, len(got), len(want))
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != mode {
		t.Fatalf("%s: mode %v, want %v", p, fi.Mode().Perm(), mode)
	}
}

func TestMaterializeSameBytes(t *testing.T) {
	// A file orkpipe's journal does not know may be replaced when it already holds the object's bytes:
	// another store's output, or a copy. Anything else of the same size is still refused.
	ctx := context.Background()
	pack := pattern("pack", 200000)
	a, b := openTestStore(t), openTestStore(t)
	oa, ob := mustIngest(t, a, pack), mustIngest(t, b, pack)
	out := t.TempDir()
	dst := filepath.Join(out, "model.orkpack")
	if _, err := a.Materialize(ctx, oa.Digest, dst, MaterializeOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Materialize(ctx, ob.Digest, dst, MaterializeOptions{})
	if err != nil || res.Replaced != "" {
		t.Fatalf("another store's file with the same bytes: %+v, %v", res, err)
	}
	checkFile(t, dst, pack, 0o444)

	copied := filepath.Join(out, "copied.orkpack")
	if err := os.WriteFile(copied, pack, 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := b.Materialize(ctx, ob.Digest, copied, MaterializeOptions{}); err != nil || res.Replaced != "" {
		t.Fatalf("a copy with the same bytes: %+v, %v", res, err)
	}
	checkFile(t, copied, pack, 0o444)

	other := filepath.Join(out, "other.orkpack")
	edited := append([]byte{}, pack...)
	edited[len(edited)-1] ^= 1
	if err := os.WriteFile(other, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = b.Materialize(ctx, ob.Digest, other, MaterializeOptions{})
	wantErrIs(t, err, ErrClobber)
	if !strings.Contains(err.Error(), "did not write") {
		t.Fatalf("error %q", err)
	}
	checkFile(t, other, edited, 0o644)
}

// TestMaterializeCopyInPlace: a copy orkpipe made (another filesystem) that has not changed since is
// left as it is by the next Materialize of the same object (no bytes copied again: same inode), and
// InPlace says so without reading it; a different object, or a copy changed since, is not in place.
func TestMaterializeCopyInPlace(t *testing.T) {
	s := openTestStore(t)
	s.forceCopy = true
	ctx := context.Background()
	pack := pattern("pack", 200000)
	o, o2 := mustIngest(t, s, pack), mustIngest(t, s, pattern("pack v2", 200000))
	dst := filepath.Join(t.TempDir(), "model.orkpack")
	if s.InPlace(ctx, o.Digest, dst) {
		t.Fatal("InPlace before the first Materialize")
	}
	if _, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{}); err != nil {
		t.Fatal(err)
	}
	ino := func() uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(dst, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	before := ino()
	if !s.InPlace(ctx, o.Digest, dst) || s.InPlace(ctx, o2.Digest, dst) {
		t.Fatalf("InPlace(o) = %v, InPlace(o2) = %v after materializing o; want true, false", s.InPlace(ctx, o.Digest, dst), s.InPlace(ctx, o2.Digest, dst))
	}
	if res, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{}); err != nil || res.Linked || ino() != before {
		t.Fatalf("second Materialize: %+v, %v, inode %d -> %d; want the copy left in place", res, err, before, ino())
	}
	checkFile(t, dst, pack, 0o444)
	os.Chmod(dst, 0o644)
	if err := os.WriteFile(dst, pack, 0o644); err != nil { // same bytes, but written since
		t.Fatal(err)
	}
	if s.InPlace(ctx, o.Digest, dst) {
		t.Error("InPlace of a copy written since the journal recorded it")
	}
	// A hard link to the object is in place whatever the journal says.
	s.forceCopy = false
	linked := filepath.Join(t.TempDir(), "linked") // the store's filesystem
	if res, err := s.Materialize(ctx, o2.Digest, linked, MaterializeOptions{}); err != nil || !res.Linked {
		t.Fatalf("Materialize on the store's filesystem: %+v, %v; want a hard link", res, err)
	}
	if err := os.Remove(s.keyPath("journal", linked)); err != nil {
		t.Fatal(err)
	}
	if !s.InPlace(ctx, o2.Digest, linked) {
		t.Error("InPlace of a hard link to the object without a journal entry")
	}
}
