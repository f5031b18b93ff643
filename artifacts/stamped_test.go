package artifacts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAdoptHashed: a file adopted unchanged after HashStamped is not hashed again and is stored
// under its digest; a file written, truncated or replaced after the hash is hashed anew and stored
// under the digest of the bytes it holds, never under the stamp's. With the identity check removed
// the damaged cases store the old digest and fail.
func TestAdoptHashed(t *testing.T) {
	ctx := context.Background()
	size := int(sealMin) + 12345
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, p string, data []byte) []byte // returns the bytes the file then holds
		rehash bool
	}{
		{"unchanged", func(t *testing.T, p string, data []byte) []byte { return data }, false},
		{"flipped byte", func(t *testing.T, p string, data []byte) []byte {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{data[len(data)/2] ^ 1}, int64(len(data)/2)); err != nil {
				t.Fatal(err)
			}
			out := append([]byte(nil), data...)
			out[len(out)/2] ^= 1
			return out
		}, true},
		{"truncated", func(t *testing.T, p string, data []byte) []byte {
			if err := os.Truncate(p, int64(len(data)-1)); err != nil {
				t.Fatal(err)
			}
			return data[:len(data)-1]
		}, true},
		{"replaced by a copy", func(t *testing.T, p string, data []byte) []byte {
			other := p + ".new"
			if err := os.WriteFile(other, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, p); err != nil {
				t.Fatal(err)
			}
			return data
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTestStore(t)
			dir, err := s.TempDir(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "out.bin")
			data := pattern(tc.name, size)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			h, err := HashStamped(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if h.Digest != SumBytes(data) || h.Size != int64(size) {
				t.Fatalf("HashStamped: %v, want %v (%d bytes)", h.Object, SumBytes(data), size)
			}
			if !h.Sealed() {
				t.Fatal("a file of sealMin bytes was not sealed; the test would prove nothing")
			}
			now := tc.damage(t, p, data)
			o, err := s.AdoptHashed(ctx, p, h)
			if err != nil {
				t.Fatal(err)
			}
			if o.Digest != SumBytes(now) || o.Size != int64(len(now)) {
				t.Fatalf("stored as %v (%d bytes), the file holds %v (%d bytes)", o.Digest, o.Size, SumBytes(now), len(now))
			}
			if err := s.Verify(ctx, o.Digest); err != nil {
				t.Fatal(err)
			}
			if n := s.adoptHashes.load(); (n == 1) != tc.rehash || n > 1 {
				t.Fatalf("%d hashes at adoption, want rehash %v", n, tc.rehash)
			}
		})
	}
}

// TestPastTimes: a stamp is sealed only when the clock is past both timestamps and both have a
// sub-second part; the zero HashedFile is never sealed.
func TestPastTimes(t *testing.T) {
	ts := func(sec, nsec int64) unix.Timespec { return unix.Timespec{Sec: sec, Nsec: nsec} }
	for _, tc := range []struct {
		name       string
		mtim, ctim unix.Timespec
		now        unix.Timespec
		past       bool
	}{
		{"both before", ts(10, 5), ts(10, 7), ts(10, 8), true},
		{"ctime at the clock", ts(10, 5), ts(10, 8), ts(10, 8), false},
		{"mtime at the clock", ts(10, 8), ts(10, 7), ts(10, 8), false},
		{"ctime after the clock", ts(10, 5), ts(11, 0o1), ts(10, 8), false},
		{"whole-second times", ts(10, 0), ts(10, 0), ts(12, 0), false},
		{"whole-second mtime", ts(10, 0), ts(10, 3), ts(12, 0), false},
		{"no clock", ts(10, 5), ts(10, 7), ts(0, 0), false},
	} {
		st := unix.Stat_t{Mtim: tc.mtim, Ctim: tc.ctim}
		if got := pastTimes(&st, tc.now); got != tc.past {
			t.Errorf("%s: pastTimes %v, want %v", tc.name, got, tc.past)
		}
	}
	if (HashedFile{}).Sealed() {
		t.Error("the zero HashedFile is sealed")
	}
}

// TestVerifyRemembered: an object this Store just adopted from a sealed stamp is verified (Verify,
// and HashFile of its object file) without a second hash while its file is untouched; written in place (even with its mtime put back),
// truncated, or looked at by another Store, it is hashed, and a damaged one is caught. With the
// identity check removed from Verify the damaged objects pass and the test fails.
func TestVerifyRemembered(t *testing.T) {
	ctx := context.Background()
	size := int(sealMin) + 777
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, s *Store, d Digest) // nil: none
		corrupt bool
	}{
		{"untouched", nil, false},
		{"byte written", func(t *testing.T, s *Store, d Digest) { flipByte(t, s, d, int64(size/3)) }, true},
		{"byte written, mtime put back", func(t *testing.T, s *Store, d Digest) {
			p := s.objectPath(d)
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			flipByte(t, s, d, 5)
			if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"truncated", func(t *testing.T, s *Store, d Digest) {
			p := s.objectPath(d)
			if err := os.Chmod(p, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, int64(size-1)); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTestStore(t)
			dir, err := s.TempDir(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "out.bin")
			if err := os.WriteFile(p, pattern(tc.name, size), 0o644); err != nil {
				t.Fatal(err)
			}
			h, err := HashStamped(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			o, err := s.AdoptHashed(ctx, p, h)
			if err != nil {
				t.Fatal(err)
			}
			if tc.damage != nil {
				tc.damage(t, s, o.Digest)
			}
			// HashFile of the object file (the engine's check of an export) takes the same shortcut.
			hf, err := s.HashFile(ctx, s.objectPath(o.Digest))
			if err != nil {
				t.Fatal(err)
			}
			if (hf.Digest == o.Digest) == tc.corrupt || s.hashes.load() != map[bool]int64{false: 0, true: 1}[tc.damage != nil] {
				t.Fatalf("HashFile of the object: %v after %d hashes", hf.Digest, s.hashes.load())
			}
			err = s.Verify(ctx, o.Digest)
			if tc.corrupt != errors.Is(err, ErrCorrupt) {
				t.Fatalf("Verify: %v, want corrupt %v", err, tc.corrupt)
			}
			if n, want := s.verifyHashes.load(), map[bool]int64{false: 0, true: 1}[tc.damage != nil]; n != want {
				t.Fatalf("Verify hashed %d times, want %d", n, want)
			}
			if tc.damage == nil { // another Store (another process) hashes
				s2, err := OpenStore(s.Dir())
				if err != nil {
					t.Fatal(err)
				}
				defer s2.Close()
				if err := s2.Verify(ctx, o.Digest); err != nil || s2.verifyHashes.load() != 1 {
					t.Fatalf("a second Store: %v after %d hashes, want nil after 1", err, s2.verifyHashes.load())
				}
			}
		})
	}
}
