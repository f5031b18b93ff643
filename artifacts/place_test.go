package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"orkpipe/internal/testfiles"
)

// needExchange skips the test (testfiles.Need) where dir's filesystem cannot swap two names
// atomically: there Materialize renames right after its last look, and a file arriving in that
// instant is not protected.
func needExchange(t *testing.T, dir string) {
	t.Helper()
	a, b := filepath.Join(dir, ".probe-a"), filepath.Join(dir, ".probe-b")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p)
	}
	if err := exchange(a, b); errors.Is(err, errNoExchange) {
		testfiles.Need(t, "a filesystem with renameat2 RENAME_EXCHANGE for %s (ext4, XFS, btrfs, tmpfs)", dir)
	} else if err != nil {
		t.Fatal(err)
	}
}

// userWrite replaces p with a new file holding b, as an editor or cp does (written aside, renamed).
func userWrite(t *testing.T, p string, b []byte) {
	t.Helper()
	tmp := p + ".user-tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Error(err)
		return
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Error(err)
	}
}

// A file that replaces the destination after Materialize checked the one there — while it copies or
// links, or between its last look and the swap — is the user's: it stays, the error says so, and no
// temp file is left. It was lost: Materialize renamed over whatever was there by then. With Force
// it is replaced, and Replaced says so; one that holds the object's bytes is kept.
func TestMaterializeReplacedWhileWriting(t *testing.T) {
	for _, copyMode := range []bool{false, true} {
		name := map[bool]string{false: "hardlink", true: "copy"}[copyMode]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := openTestStore(t)
			s.forceCopy = copyMode
			old := mustIngest(t, s, pattern("old", 200000))
			pack := pattern("pack", 200000)
			o := mustIngest(t, s, pack)
			out := t.TempDir()
			needExchange(t, out)
			mine := []byte("the user's own file, do not lose")
			for _, c := range []struct {
				name    string
				swap    bool // replace it just before the swap, not while writing
				put     []byte
				force   bool
				wantErr error
				want    []byte
			}{
				{name: "while writing", put: mine, wantErr: ErrClobber, want: mine},
				{name: "before the swap", swap: true, put: mine, wantErr: ErrClobber, want: mine},
				{name: "while writing, forced", put: mine, force: true, want: pack},
				{name: "before the swap, forced", swap: true, put: mine, force: true, want: pack},
				{name: "the same bytes while writing", put: pack, want: pack},
				{name: "the same bytes before the swap", swap: true, put: pack, want: pack},
			} {
				dst := filepath.Join(out, strings.ReplaceAll(c.name, " ", "-"))
				if _, err := s.Materialize(ctx, old.Digest, dst, MaterializeOptions{}); err != nil {
					t.Fatal(err)
				}
				hook := func(p string) { userWrite(t, p, c.put) }
				if c.swap {
					s.beforeSwap = hook
				} else {
					s.beforeRename = hook
				}
				res, err := s.Materialize(ctx, o.Digest, dst, MaterializeOptions{Force: c.force})
				s.beforeRename, s.beforeSwap = nil, nil
				if !errors.Is(err, c.wantErr) || (err == nil) != (c.wantErr == nil) {
					t.Fatalf("%s: Materialize: %v, want %v", c.name, err, c.wantErr)
				}
				if err != nil && !strings.Contains(err.Error(), "while materializing") {
					t.Fatalf("%s: %q does not say the file arrived while materializing", c.name, err)
				}
				if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, c.want) {
					t.Fatalf("%s: %s holds %q (%v), want %d bytes", c.name, dst, got[:min(len(got), 40)], err, len(c.want))
				}
				if c.force && !bytes.Equal(c.put, pack) && !strings.Contains(res.Replaced, dst+": orkpipe wrote it as "+old.Digest.String()) {
					t.Fatalf("%s: Replaced %q does not say what was replaced", c.name, res.Replaced)
				}
				if inPlace := s.InPlace(ctx, o.Digest, dst); inPlace != bytes.Equal(c.want, pack) {
					t.Fatalf("%s: InPlace %v, want %v", c.name, inPlace, !inPlace)
				}
			}
			if left := leftovers(t, out); len(left) > 0 {
				t.Fatalf("files left: %v", left)
			}
		})
	}
}

// leftovers lists the names Materialize writes through (.tmp, .new, .old) and the tests' own temp
// names found in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) || strings.HasSuffix(e.Name(), ".user-tmp") {
			names = append(names, e.Name())
		}
	}
	return names
}

// Materialize calls really racing into one directory, each on its own Store of one cache (as
// processes would be), with copies so that each takes a while. Round by round:
//
//   - a user replaces an output that builds are rewriting: the user's file is what remains, whatever
//     the interleaving (Materialize renamed over a file it had never checked), and no build's journal
//     vouches for the path;
//   - builds of two different objects write the same path: every error is ErrClobber, and the journal
//     never says the path holds an object whose bytes it does not hold (a build recorded its object
//     for the file another build had just put there, and the next Materialize of that object then
//     left the wrong bytes in place).
func TestMaterializeRacing(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "cache")
	const writers = 4
	var stores []*Store
	for range writers {
		s := openTestStoreAt(t, dir)
		s.forceCopy = true
		stores = append(stores, s)
	}
	packA, packB := pattern("pack A", 3<<20), pattern("pack B", 3<<20)
	a, b := mustIngest(t, stores[0], packA), mustIngest(t, stores[0], packB)
	out := t.TempDir()
	needExchange(t, out)
	mine := []byte("the user's own file, do not lose")
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	for round := range rounds {
		t.Run(fmt.Sprintf("user %d", round), func(t *testing.T) {
			dst := filepath.Join(out, fmt.Sprintf("user-%d.orkpack", round))
			if _, err := stores[0].Materialize(ctx, a.Digest, dst, MaterializeOptions{}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make([]error, writers)
			for i, s := range stores {
				wg.Go(func() { _, errs[i] = s.Materialize(ctx, b.Digest, dst, MaterializeOptions{}) })
			}
			wg.Go(func() { userWrite(t, dst, mine) })
			wg.Wait()
			for i, err := range errs {
				if err != nil && !errors.Is(err, ErrClobber) {
					t.Errorf("writer %d: %v", i, err)
				}
			}
			if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, mine) {
				t.Fatalf("%s holds %d bytes (%v), not the user's file", dst, len(got), err)
			}
			for _, d := range []Digest{a.Digest, b.Digest} {
				if stores[0].InPlace(ctx, d, dst) {
					t.Fatalf("the journal says the user's file is %s", d)
				}
			}
		})
		t.Run(fmt.Sprintf("two objects %d", round), func(t *testing.T) {
			dst := filepath.Join(out, fmt.Sprintf("both-%d.orkpack", round))
			var wg sync.WaitGroup
			errs := make([]error, writers)
			for i, s := range stores {
				d := []Digest{a.Digest, b.Digest}[i%2]
				wg.Go(func() { _, errs[i] = s.Materialize(ctx, d, dst, MaterializeOptions{}) })
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil && !errors.Is(err, ErrClobber) {
					t.Errorf("writer %d: %v", i, err)
				}
			}
			got, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			for d, want := range map[Digest][]byte{a.Digest: packA, b.Digest: packB} {
				if stores[0].InPlace(ctx, d, dst) && !bytes.Equal(got, want) {
					t.Fatalf("the journal says %s holds %s, but it holds other bytes", dst, d)
				}
			}
			// What the next build of A finds there: A's bytes, whoever won.
			if _, err := stores[1].Materialize(ctx, a.Digest, dst, MaterializeOptions{Force: true}); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, packA) {
				t.Fatalf("after materializing A again %s holds %d bytes (%v), not A's", dst, len(got), err)
			}
		})
	}
	if left := leftovers(t, out); len(left) > 0 {
		t.Fatalf("files left: %v", left)
	}
}
