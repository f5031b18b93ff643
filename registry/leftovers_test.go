package registry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"orkpipe/registry/regtest"
)

// TestPullReportsOtherArtifactsState: a pull of artifact A into DIR is interrupted (its context
// cancelled once some of its ranges landed); a pull of artifact B into DIR then succeeds, leaves A's
// state in place (pulling A again resumes from it) and reports it: its directory, size on disk and
// artifact digest, in PullResult.Leftovers and a warning saying how to resume or remove it.
func TestPullReportsOtherArtifactsState(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	a, refA := pushPack(t, reg, "a", 1, true)
	b, refB := pushPack(t, reg, "b", 2, true)
	dst := t.TempDir()
	interruptPull(t, reg, refA, dst)
	stateA := filepath.Join(dst, PartialDir, a.Artifact.Digest.Hex)
	journaled := int64(len(journalParts(t, dst, a.Artifact)))
	if journaled == 0 {
		t.Fatalf("the interrupted pull of A journaled no range in %s", stateA)
	}

	var log bytes.Buffer
	res, err := Pull(ctx, refB, dst, plain(reg), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatalf("pull of B into the directory holding A's state: %v", err)
	}
	if res.Digest != b.Artifact.Digest {
		t.Fatalf("pulled %s, want B %s", res.Digest, b.Artifact.Digest)
	}
	if _, err := os.Stat(stateA); err != nil {
		t.Fatalf("A's state was not left in place: %v", err)
	}
	if len(res.Leftovers) != 1 {
		t.Fatalf("leftovers %+v, want A's state only", res.Leftovers)
	}
	l := res.Leftovers[0]
	if l.Dir != stateA || l.Digest != a.Artifact.Digest || l.Bytes < journaled*MinRangeSize {
		t.Errorf("leftover %+v, want %s of artifact %s taking at least the %d bytes of its %d journaled ranges", l, stateA, a.Artifact.Digest, journaled*MinRangeSize, journaled)
	}
	for _, want := range []string{"interrupted pull", stateA, a.Artifact.Digest.String(), "rm -r " + stateA, "resume="} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("pull's warning lacks %q:\n%s", want, log.String())
		}
	}

	t.Log(log.String())

	// Pulling A again resumes from its state and, with nothing else left, reports nothing.
	log.Reset()
	ra, err := Pull(ctx, refA, dst, plain(reg), testRange)
	if err != nil {
		t.Fatal(err)
	}
	resumed := 0
	for _, f := range ra.Files {
		resumed += f.Resumed
	}
	if resumed == 0 || len(ra.Leftovers) != 0 {
		t.Errorf("pull of A after B: %d ranges resumed, leftovers %+v; want A's ranges resumed and nothing left", resumed, ra.Leftovers)
	}
	if _, err := os.Stat(filepath.Join(dst, PartialDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s remains after every pull finished: %v", PartialDir, err)
	}
}

// TestPullLeavesRunningPullUnreported: a pull of artifact B into DIR, while a pull of artifact A
// into DIR is running (held mid-transfer) and a pull of artifact C into DIR was interrupted,
// reports only C's state as a leftover: A's is a running pull's (its lock held), not a leftover; it
// was reported too. A, released, then finishes.
func TestPullLeavesRunningPullUnreported(t *testing.T) {
	ctx := ctxT(t)
	reg := regtest.Start(t, nil)
	// B shares no file name with A (no provenance.json): both pulls write into DIR at once.
	a, refA := pushPack(t, reg, "a", 3, true)
	_, refB := pushPack(t, reg, "b", 4, false)
	c, refC := pushPack(t, reg, "c", 5, true)
	dst := t.TempDir()
	interruptPull(t, reg, refC, dst) // C: a dead state

	// A: held at its first bytes until B has finished (a live state).
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := ProgressFunc(func(e Event) {
		if e.Kind == EventBytes {
			once.Do(func() { close(reached); <-release })
		}
	})
	doneA := make(chan error, 1)
	go func() {
		_, err := Pull(ctx, refA, dst, plain(reg), testRange, WithJobs(1), WithProgress(hold))
		doneA <- err
	}()
	select {
	case <-reached:
	case err := <-doneA:
		t.Fatalf("the pull of A ended before it was held: %v", err)
	}
	res, err := Pull(ctx, refB, dst, plain(reg))
	close(release)
	if err != nil {
		t.Fatalf("pull of B beside A's running pull and C's interrupted one: %v", err)
	}
	stateC := filepath.Join(dst, PartialDir, c.Artifact.Digest.Hex)
	if len(res.Leftovers) != 1 || res.Leftovers[0].Dir != stateC {
		t.Errorf("leftovers %+v, want C's state %s only (A's pull %s is running)", res.Leftovers, stateC, a.Artifact.Digest)
	}
	if err := <-doneA; err != nil {
		t.Fatalf("the pull of A, released: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, PartialDir, a.Artifact.Digest.Hex)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("A's state remains after its pull finished: %v", err)
	}
}

// pushPack pushes a directory holding NAME.orkpack (6 ranges of random bytes from seed) and, with
// prov, a provenance to packs/NAME:v1.
func pushPack(t *testing.T, reg *regtest.Registry, name string, seed uint64, prov bool) (*PushResult, string) {
	t.Helper()
	src := t.TempDir()
	writeRandom(t, filepath.Join(src, name+".orkpack"), 6*MinRangeSize, seed)
	if prov {
		writeProvenance(t, src)
	}
	ref := reg.Ref("packs/"+name, "v1")
	res, err := Push(ctxT(t), src, ref, plain(reg), testRange)
	if err != nil {
		t.Fatal(err)
	}
	return res, ref
}

// interruptPull pulls ref into dst, one range at a time, and cancels the pull once two ranges'
// bytes arrived: it leaves its state in dst, its lock free.
func interruptPull(t *testing.T, reg *regtest.Registry, ref, dst string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var got int64
	stop := ProgressFunc(func(e Event) {
		if e.Kind == EventBytes {
			if got += e.Bytes; got >= 2*MinRangeSize {
				cancel()
			}
		}
	})
	if _, err := Pull(ctx, ref, dst, plain(reg), testRange, WithJobs(1), WithProgress(stop)); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted pull of %s: err = %v, want context.Canceled", ref, err)
	}
}
