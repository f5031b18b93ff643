package registry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	push := func(name string, seed uint64) (*PushResult, string) {
		src := t.TempDir()
		writeRandom(t, filepath.Join(src, name+".orkpack"), 6*MinRangeSize, seed)
		writeProvenance(t, src)
		ref := reg.Ref("packs/"+name, "v1")
		res, err := Push(ctx, src, ref, plain(reg), testRange)
		if err != nil {
			t.Fatal(err)
		}
		return res, ref
	}
	a, refA := push("a", 1)
	b, refB := push("b", 2)
	dst := t.TempDir()

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got int64
	stop := ProgressFunc(func(e Event) {
		if e.Kind == EventBytes {
			if got += e.Bytes; got >= 2*MinRangeSize {
				cancel()
			}
		}
	})
	if _, err := Pull(cctx, refA, dst, plain(reg), testRange, WithJobs(1), WithProgress(stop)); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted pull of A: err = %v, want context.Canceled", err)
	}
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
