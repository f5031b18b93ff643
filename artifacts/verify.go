package artifacts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
)

// VerifyReport is the result of VerifyAll.
type VerifyReport struct {
	Checked int            `json:"checked"` // objects re-hashed
	Bytes   int64          `json:"bytes"`   // their total logical size
	Corrupt []CorruptEntry `json:"corrupt"` // objects found corrupt and quarantined
	Strays  []string       `json:"strays"`  // files under objects/ that are not named like an object (left alone)
}

// CorruptEntry names one object VerifyAll quarantined.
type CorruptEntry struct {
	Digest Digest `json:"digest"`
	Path   string `json:"path"`
	Error  string `json:"error"`
}

// OK reports whether nothing was corrupt.
func (r VerifyReport) OK() bool { return len(r.Corrupt) == 0 }

// objectEntry is one stored object found by listObjects.
type objectEntry struct {
	Object
	path string
}

// listObjects walks objects/ and returns the objects and the stray file names found there.
func (s *Store) listObjects(ctx context.Context) (objs []objectEntry, strays []string, err error) {
	root := filepath.Join(s.dir, "objects")
	fans, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s: %w", root, err)
	}
	for _, fan := range fans {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		dir := filepath.Join(root, fan.Name())
		if !fan.IsDir() {
			strays = append(strays, dir)
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("listing %s: %w", dir, err)
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			d, perr := ParseHex(e.Name())
			if perr != nil || e.Name()[:2] != fan.Name() || !e.Type().IsRegular() {
				strays = append(strays, p)
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue // removed meanwhile (GC, quarantine)
			}
			objs = append(objs, objectEntry{Object{Digest: d, Size: fi.Size()}, p})
		}
	}
	return objs, strays, nil
}

// VerifyAll re-hashes every object, using one worker per CPU, and quarantines the corrupt ones.
// The error is non-nil only if the walk itself failed or ctx ended; corrupt objects are in the
// report (check OK).
func (s *Store) VerifyAll(ctx context.Context) (VerifyReport, error) {
	objs, strays, err := s.listObjects(ctx)
	if err != nil {
		return VerifyReport{}, err
	}
	rep := VerifyReport{Strays: strays}
	var mu sync.Mutex
	var firstErr error
	work := make(chan objectEntry)
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range work {
				err := s.Verify(ctx, o.Digest)
				mu.Lock()
				switch {
				case err == nil:
					rep.Checked++
					rep.Bytes += o.Size
				case errors.Is(err, ErrCorrupt):
					rep.Checked++
					rep.Bytes += o.Size
					rep.Corrupt = append(rep.Corrupt, CorruptEntry{Digest: o.Digest, Path: o.path, Error: err.Error()})
				case errors.Is(err, ErrNotFound):
					// collected or quarantined by someone else meanwhile
				default:
					if firstErr == nil {
						firstErr = err
					}
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, o := range objs {
		select {
		case work <- o:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	sort.Slice(rep.Corrupt, func(i, j int) bool { return rep.Corrupt[i].Path < rep.Corrupt[j].Path })
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return rep, firstErr
}
