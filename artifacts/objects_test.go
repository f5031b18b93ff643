package artifacts

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

func TestIngestRoundTrip(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"one byte", []byte{7}},
		{"random 5 MiB + 3", pattern("a", 5<<20+3)},
		{"zeros 1 MiB", make([]byte, 1<<20)},
		{"zeros then data", append(make([]byte, 3<<20), pattern("b", 100)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := mustIngest(t, s, tc.data)
			if o.Digest != SumBytes(tc.data) || o.Size != int64(len(tc.data)) {
				t.Fatalf("Ingest = %v/%d, want %v/%d", o.Digest, o.Size, SumBytes(tc.data), len(tc.data))
			}
			st, err := s.Stat(ctx, o.Digest)
			if err != nil || st != o {
				t.Fatalf("Stat = %v, %v; want %v", st, err, o)
			}
			got, err := readAll(t, s, o.Digest)
			if err != nil || !bytes.Equal(got, tc.data) {
				t.Fatalf("Open: %d bytes, err %v; want the %d ingested bytes", len(got), err, len(tc.data))
			}
			p, err := s.Path(ctx, o.Digest)
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(p)
			if err != nil || fi.Mode().Perm() != 0o444 {
				t.Fatalf("object file %s: mode %v, err %v; want 0444", p, fi.Mode(), err)
			}
			if err := s.Verify(ctx, o.Digest); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestIngestFileGGUF(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	src := testfiles.Path(t, "stories260K.gguf")
	want, err := HashPath(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.IngestFile(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if o != want {
		t.Fatalf("IngestFile = %v, HashPath = %v", o, want)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if SumBytes(b) != o.Digest {
		t.Fatalf("digest %v differs from the BLAKE3 of the file bytes %v", o.Digest, SumBytes(b))
	}
	if stored, err := os.ReadFile(s.objectPath(o.Digest)); err != nil || !bytes.Equal(stored, b) {
		t.Fatalf("object file differs from the ingested file (%d bytes, err %v)", len(stored), err)
	}
	// Ingesting again is a no-op that returns the same object.
	again, err := s.Ingest(ctx, bytes.NewReader(b))
	if err != nil || again != o {
		t.Fatalf("re-ingest = %v, %v", again, err)
	}
	if n := len(objectFiles(t, s)); n != 1 {
		t.Fatalf("%d object files, want 1", n)
	}
}

func TestIngestExpect(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	data := pattern("expect", 100000)
	good := Object{Digest: SumBytes(data), Size: int64(len(data))}
	if o, err := s.IngestExpect(ctx, bytes.NewReader(data), good); err != nil || o != good {
		t.Fatalf("IngestExpect = %v, %v", o, err)
	}
	bad := append([]byte{}, data...)
	bad[500] ^= 1
	_, err := s.IngestExpect(ctx, bytes.NewReader(bad), Object{Digest: SumBytes(pattern("other", 10)), Size: int64(len(bad))})
	wantErrIs(t, err, ErrCorrupt)
	if _, err := s.Stat(ctx, SumBytes(bad)); !isNotFound(err) {
		t.Fatalf("mismatching download was stored: %v", err)
	}
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

func TestFlippedByteQuarantined(t *testing.T) {
	ctx := context.Background()
	for _, via := range []string{"Open", "Verify", "VerifyAll"} {
		t.Run(via, func(t *testing.T) {
			s := openTestStore(t)
			data := pattern("flip", 3<<20)
			o := mustIngest(t, s, data)
			other := mustIngest(t, s, pattern("intact", 1000))
			flipByte(t, s, o.Digest, 1234567)
			objPath := s.objectPath(o.Digest)

			var err error
			switch via {
			case "Open":
				_, err = readAll(t, s, o.Digest)
			case "Verify":
				err = s.Verify(ctx, o.Digest)
			case "VerifyAll":
				rep, werr := s.VerifyAll(ctx)
				if werr != nil {
					t.Fatal(werr)
				}
				if rep.OK() || len(rep.Corrupt) != 1 || rep.Corrupt[0].Digest != o.Digest || rep.Checked != 2 {
					t.Fatalf("VerifyAll report %+v, want 2 checked and only %v corrupt", rep, o.Digest)
				}
				err = errors.New(rep.Corrupt[0].Error)
				if rep.Corrupt[0].Path != objPath {
					t.Fatalf("report path %s, want %s", rep.Corrupt[0].Path, objPath)
				}
			}
			if err == nil {
				t.Fatal("flipped byte not detected")
			}
			if via != "VerifyAll" {
				wantErrIs(t, err, ErrCorrupt)
			}
			if !strings.Contains(err.Error(), o.Digest.String()) || !strings.Contains(err.Error(), objPath) {
				t.Fatalf("error %q does not name the digest and path", err)
			}
			q, _ := filepath.Glob(filepath.Join(s.Dir(), "quarantine", o.Digest.Hex()+".*"))
			if len(q) != 1 {
				t.Fatalf("quarantine holds %v, want one file for %v", q, o.Digest)
			}
			if _, err := s.Stat(ctx, o.Digest); !isNotFound(err) {
				t.Fatalf("Stat after quarantine: %v, want ErrNotFound", err)
			}
			wantErrIs(t, s.Verify(ctx, o.Digest), ErrNotFound)
			if err := s.Verify(ctx, other.Digest); err != nil {
				t.Fatalf("the other object: %v", err)
			}
			// The producer re-runs: the good bytes are stored again.
			if again := mustIngest(t, s, data); again != o {
				t.Fatalf("re-ingest = %v", again)
			}
			if err := s.Verify(ctx, o.Digest); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAdoptFile(t *testing.T) {
	s := openTestStore(t)
	ctx := context.Background()
	dir, err := s.TempDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "out.bin")
	data := pattern("adopt", 1<<20)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after os.FileInfo
	before, _ = os.Stat(p)
	o, err := s.AdoptFile(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if o.Digest != SumBytes(data) {
		t.Fatalf("AdoptFile digest %v, want %v", o.Digest, SumBytes(data))
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("temp file still there: %v", err)
	}
	after, _ = os.Stat(s.objectPath(o.Digest))
	if !os.SameFile(before, after) {
		t.Fatal("AdoptFile copied the file instead of moving it")
	}
	// Outside a TempDir: refused.
	outside := filepath.Join(t.TempDir(), "user.bin")
	os.WriteFile(outside, data, 0o644)
	if _, err := s.AdoptFile(ctx, outside); err == nil || !strings.Contains(err.Error(), outside) {
		t.Fatalf("adopting %s: %v, want an error naming it", outside, err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatalf("refused file was touched: %v", err)
	}
}

func TestOpenStoreRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644)
	if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Fatalf("OpenStore on a user dir: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "LAYOUT"), []byte("something else\n"), 0o644)
	if _, err := OpenStore(dir); err == nil || !strings.Contains(err.Error(), "LAYOUT") {
		t.Fatalf("OpenStore with another LAYOUT: %v", err)
	}
}
