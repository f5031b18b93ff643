package registry

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sync/errgroup"

	"orkpipe/artifacts"
	"orkpipe/artifacts/sparse"
	"orkpipe/internal/units"
	"orkpipe/registry/oci"
)

// PullResult describes a finished pull.
type PullResult struct {
	Digest       v1.Hash
	Artifact     *Artifact
	Files        []PulledFile  // the files pulled, in the artifact's order
	Downloaded   int64         // layer bytes received (retries included)
	Attestations []Attestation // verified provenance attestations, when WithTrust was given
	// Leftovers lists the state other artifacts' interrupted pulls left in the directory (each also
	// logged as a warning): Pull removes only its own artifact's state.
	Leftovers []LeftoverState
}

// PulledFile is one file of a pull. Every file is verified by BLAKE3: each range against its
// chaining value (or the whole file against its BLAKE3), and the ranges' values against the file's.
type PulledFile struct {
	Name    string
	Path    string
	Skipped bool // already present: its size and BLAKE3 (recomputed) are the manifest's
	Resumed int  // ranges reused from an interrupted pull (re-verified on disk)
}

// Pull downloads the artifact at ref into dir. Ranges of every file download in parallel (HTTP
// Range requests on the file's blob); each is checked as it streams (rangepull.go) into a sparse
// file under dir/.orkpipe-partial, holes left unwritten, and journaled once verified; a file whose
// ranges all verified is made read-only, fsynced and renamed into dir. A killed pull resumes from
// the ranges it had verified (re-hashed from disk first). A file already in dir is kept only if its
// size and BLAKE3 are the artifact's; a different one is an error (ErrExists) unless WithForce,
// and is replaced only by that final rename. With WithTrust, the artifact must carry a provenance
// attestation signed by a trusted key that names this manifest; otherwise nothing is downloaded.
// With WithFiles only the named files are fetched (PullResult.Files lists them alone).
func Pull(ctx context.Context, ref, dir string, opts ...Option) (*PullResult, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, err
	}
	r, err := oci.Open(ctx, ref, false, o.conn...)
	if err != nil {
		return nil, err
	}
	art, err := fetchArtifact(ctx, r)
	if err != nil {
		return nil, err
	}
	files, err := selectFiles(art, o.only)
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", ref, art.Digest, err)
	}
	res := &PullResult{Digest: art.Digest, Artifact: art}
	if len(o.trust) > 0 {
		if res.Attestations, err = trusted(ctx, r, o, art); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	state, err := openPartial(dir, art.Digest.Hex)
	if err != nil {
		return nil, err
	}
	defer state.close()

	var all, jobs []*fileJob // all files in the artifact's order; those to download
	defer func() {
		for _, fj := range jobs {
			fj.closeData() // a file whose ranges did not all run (the pull failed)
		}
	}()
	for _, f := range files {
		fj, err := prepareDest(ctx, dir, f, state, o)
		if err != nil {
			return res, err
		}
		all = append(all, fj)
		if fj.result.Skipped {
			o.progress.Report(Event{Kind: EventSkipped, File: f.Name})
			continue
		}
		jobs = append(jobs, fj)
	}
	if err := checkSpace(ref, dir, jobs, o, r.Logger()); err != nil {
		return res, err
	}

	var downloaded atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.jobs)
	// Ranges start in the artifact's order, at most o.jobs at once, and a file's partial file is
	// open from its first range's start to its last range's end: at most o.jobs+1 are open at once,
	// however many files the artifact has.
	var stopped error // why ranges were left unstarted
schedule:
	for _, fj := range jobs {
		o.progress.Report(Event{Kind: EventStart, File: fj.file.Name, Total: fj.todoBytes})
		for k := range fj.file.Ranges {
			if stopped = gctx.Err(); stopped != nil {
				break schedule // a range failed, or ctx is done: start no other
			}
			g.Go(func() error {
				err := fj.acquire(gctx, state)
				if err == nil {
					err = fj.pullRange(gctx, r, o, state, k, &downloaded)
					if err == nil && fj.pending.Add(-1) == 0 {
						err = fj.finish(o, r)
					}
					err = errors.Join(err, fj.release(err != nil))
				}
				if err != nil {
					o.progress.Report(Event{Kind: EventDone, File: fj.file.Name, Err: err})
				}
				return err
			})
		}
	}
	if err = g.Wait(); err == nil && stopped != nil {
		err = fmt.Errorf("pull %s into %s: %w", ref, dir, stopped) // the ranges that ran succeeded; the rest never started
	}
	res.Downloaded = downloaded.Load()
	for _, fj := range all {
		fj.result.Resumed = int(fj.resumed.Load())
		res.Files = append(res.Files, fj.result)
	}
	if err != nil {
		return res, err
	}
	if err := artifacts.SyncDir(dir); err != nil {
		return res, err
	}
	if err := state.remove(); err != nil {
		return res, err
	}
	res.Leftovers = reportLeftovers(dir, art.Digest.Hex, r.Logger())
	return res, nil
}

// reportLeftovers returns the interrupted pull states of other artifacts in dir and logs a warning
// for each: its directory, size and artifact, and how to resume or remove it. A directory that
// cannot be listed is logged too (the pull itself succeeded).
func reportLeftovers(dir, current string, log *slog.Logger) []LeftoverState {
	ls, err := leftoverStates(dir, current)
	if err != nil {
		log.Warn("pull: could not look for other artifacts' interrupted pull state", "dir", dir, "err", err)
	}
	for _, l := range ls {
		log.Warn("pull: another artifact's interrupted pull left its state in the directory", "state", l.Dir,
			"bytes", l.Bytes, "size", units.FormatSize(l.Bytes), "artifact", l.Digest.String(),
			"resume", "pull that artifact (REPO@"+l.Digest.String()+") into "+dir+" again",
			"remove", "rm -r "+l.Dir+" (when no pull of it is running)")
	}
	return ls
}

// checkSpace refuses (ErrNoSpace) a pull into dir whose files still to write (jobs: their data
// extents in the ranges not journaled; holes, files already in place and journaled ranges take
// nothing new) need more bytes than dir's filesystem has free, unless WithoutSpaceCheck. The need
// is a lower bound of what the filesystem allocates (no block rounding, no metadata), so a pull that
// fits is never refused; it may count twice the bytes of ranges an interrupted pull had in flight.
// A filesystem whose free space cannot be read is logged and the pull goes on.
func checkSpace(ref, dir string, jobs []*fileJob, o *options, log *slog.Logger) error {
	var need int64
	for _, fj := range jobs {
		need += fj.newBytes
	}
	if o.noSpaceCheck || need == 0 {
		return nil
	}
	free, err := o.freeSpace(dir)
	if err != nil {
		log.Warn("pull: the destination's free space is unknown; not checked", "dir", dir, "err", err)
		return nil
	}
	if need > free {
		return fmt.Errorf("pull %s into %s: %w: its %d files still to write need %d bytes (%s), the filesystem has %d bytes (%s) free: free space there, choose another directory, or pass --no-space-check (WithoutSpaceCheck)",
			ref, dir, ErrNoSpace, len(jobs), need, units.FormatSize(need), free, units.FormatSize(free))
	}
	return nil
}

// selectFiles returns the files of art named by only (all of them when only is nil), in art's order.
func selectFiles(art *Artifact, only []string) ([]File, error) {
	if only == nil {
		return art.Files, nil
	}
	var out []File
	for _, f := range art.Files {
		if slices.Contains(only, f.Name) {
			out = append(out, f)
		}
	}
	for _, n := range only {
		if _, ok := art.File(n); !ok {
			return nil, fmt.Errorf("%w: %q", ErrNoFile, n)
		}
	}
	return out, nil
}

// fetchArtifact gets (digest-checked) and parses the manifest r's reference names.
func fetchArtifact(ctx context.Context, r *oci.Repo) (*Artifact, error) {
	raw, _, err := r.GetManifest(ctx, "")
	if err != nil {
		return nil, err
	}
	art, err := ParseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Ref(), err)
	}
	return art, nil
}

// trusted returns the provenance attestations of art validly signed by a trusted key, or ErrUntrusted
// naming what was found instead.
func trusted(ctx context.Context, r *oci.Repo, o *options, art *Artifact) ([]Attestation, error) {
	atts, skipped, err := attestations(ctx, r, o, art.Digest, o.pullOrder())
	if err != nil {
		return nil, err
	}
	var ok []Attestation
	var why []error
	for _, a := range atts {
		switch {
		case a.Err != nil:
			why = append(why, a.Err)
		case a.PredicateType != PredicateSLSAProvenance:
			continue
		case len(a.TrustedBy) == 0:
			why = append(why, fmt.Errorf("attestation %s: not signed by a trusted key", a.Digest))
		default:
			if err := filesMatch(a.Statement, art); err != nil {
				why = append(why, fmt.Errorf("attestation %s: %w", a.Digest, err))
				continue
			}
			ok = append(ok, a)
		}
	}
	if len(ok) == 0 {
		if len(atts) == 0 {
			why = append(why, errors.New("no attestations attached (pushed without --sign, or copied without its referrers: oras cp -r copies them)"))
		}
		if skipped > 0 {
			why = append(why, fmt.Errorf("%d more attestations not fetched (at most %d, and %d MiB of envelopes, are)", skipped, maxAttestations, maxAttestationBytes>>20))
		}
		return nil, fmt.Errorf("%s (%s): %w: %w", r.Ref(), art.Digest, ErrUntrusted, errors.Join(why...))
	}
	return ok, nil
}

// filesMatch checks that the signed statement's file subjects agree with the manifest's files (as
// strings: pull verifies each file's BLAKE3, not its sha256, which equals the signed and annotated
// sha256 because the bytes are the ones whose BLAKE3 was signed).
func filesMatch(st *Statement, art *Artifact) error {
	for _, f := range art.Files {
		found := false
		for _, s := range st.Subject {
			if s.Name == f.Name {
				found = true
				if "sha256:"+s.Digest["sha256"] != f.Digests.SHA256 || s.Digest["blake3"] != hex.EncodeToString(f.Digests.BLAKE3.Bytes()) {
					return fmt.Errorf("%w: signed digests of %s differ from the manifest", ErrUntrusted, f.Name)
				}
			}
		}
		if !found {
			return fmt.Errorf("%w: %s is not a signed subject", ErrUntrusted, f.Name)
		}
	}
	return nil
}

// fileJob is one file being pulled.
type fileJob struct {
	file      File
	dest      string
	replace   bool
	segs      []segment // the archive's segments, for a tar form
	todoBytes int64     // stored bytes to download (the journaled ranges' excluded)
	newBytes  int64     // file bytes to write: the data extents of the ranges not journaled
	pending   atomic.Int64
	resumed   atomic.Int64
	result    PulledFile

	mu      sync.Mutex
	data    *os.File // the partial file while a range of it runs (acquire, release)
	users   int      // ranges holding data
	opened  bool     // data was opened in this pull (it is never opened twice)
	openErr error    // why opening it failed
	failed  bool     // a range of the file failed: data is closed when its last user leaves
}

// prepareDest checks an existing destination and sizes the work of the file; its partial file is
// opened (or resumed) by its first range (acquire).
func prepareDest(ctx context.Context, dir string, f File, state *partialState, o *options) (*fileJob, error) {
	fj := &fileJob{file: f, dest: filepath.Join(dir, f.Name)}
	fj.result = PulledFile{Name: f.Name, Path: fj.dest}
	if st, err := os.Lstat(fj.dest); err == nil {
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: exists and is not a regular file", fj.dest)
		}
		got, err := artifacts.HashPath(ctx, fj.dest)
		if err != nil {
			return nil, err
		}
		if got.Size == f.Digests.Size && got.Digest == f.Digests.BLAKE3 {
			fj.result.Skipped = true
			return fj, nil
		}
		if !o.force {
			return nil, fmt.Errorf("%s: %w: it is %d bytes %s, the artifact's file is %d bytes %s (pull --force, WithForce, replaces it)",
				fj.dest, ErrExists, got.Size, got.Digest, f.Digests.Size, f.Digests.BLAKE3)
		}
		fj.replace = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if f.Form != FormRaw {
		fj.segs = f.segments()
	}
	for k, rg := range f.Ranges {
		if !state.recorded(f, k) {
			fj.todoBytes += rg.Stored.Len
			fj.newBytes += sparse.Len(clip(f.Extents, rg.Off, rg.Len))
		}
	}
	fj.pending.Store(int64(len(f.Ranges)))
	return fj, nil
}

// acquire makes the partial file open for one range of the file, opening it for the first: created
// at full length, or, left by an interrupted pull, resized and its holes cleared (clearHoles). It is
// opened once per pull: after its last range released it (or one failed), acquire is an error.
func (fj *fileJob) acquire(ctx context.Context, state *partialState) error {
	fj.mu.Lock()
	defer fj.mu.Unlock()
	if fj.data == nil {
		switch {
		case fj.openErr != nil:
			return fj.openErr
		case fj.opened:
			return fmt.Errorf("%s: its partial file %s was closed before all its ranges ran", fj.file.Name, state.dataPath(fj.file.Name))
		}
		fj.opened = true
		if fj.data, fj.openErr = openData(ctx, state.dataPath(fj.file.Name), fj.file); fj.openErr != nil {
			return fj.openErr
		}
	}
	fj.users++
	return nil
}

// release ends a range's use of the partial file, failed saying whether the range failed. The file
// is closed when no range uses it and either all its ranges are done (finished) or one failed; the
// error is the close's.
func (fj *fileJob) release(failed bool) error {
	fj.mu.Lock()
	defer fj.mu.Unlock()
	fj.users--
	fj.failed = fj.failed || failed
	if fj.users > 0 || (fj.pending.Load() > 0 && !fj.failed) {
		return nil
	}
	err := fj.data.Close()
	fj.data = nil
	if err != nil && !fj.failed {
		return fmt.Errorf("%s: close %w", fj.file.Name, err)
	}
	return nil
}

// closeData closes the partial file if it is still open (a pull that failed before all of the
// file's ranges ran).
func (fj *fileJob) closeData() {
	fj.mu.Lock()
	defer fj.mu.Unlock()
	if fj.data != nil {
		fj.data.Close()
		fj.data = nil
	}
}

// openData opens the partial file of f at path: created at f's size, or, left by an interrupted
// pull, resized and its holes cleared.
func openData(ctx context.Context, path string, f File) (*os.File, error) {
	data, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	resumed := errors.Is(err, os.ErrExist)
	if resumed { // an interrupted pull's partial file
		data, err = os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, err
	}
	if err := data.Truncate(f.Digests.Size); err != nil {
		data.Close()
		return nil, fmt.Errorf("%s: %w", data.Name(), err)
	}
	if resumed {
		if err := clearHoles(ctx, data, f.Digests.Size, f.Extents); err != nil {
			data.Close()
			return nil, err
		}
	}
	return data, nil
}

// pullRange makes range k of the file verified on disk: a range journaled by an interrupted pull is
// re-hashed from disk and kept if it still verifies; otherwise it is downloaded (fetchRange) and
// journaled.
func (fj *fileJob) pullRange(ctx context.Context, r *oci.Repo, o *options, state *partialState, k int, downloaded *atomic.Int64) error {
	if state.recorded(fj.file, k) && fj.verifyLocal(ctx, k) {
		fj.resumed.Add(1)
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := fj.fetchRange(ctx, r, o, k, downloaded); err != nil {
		return err
	}
	return state.record(fj.file, k)
}

// finish makes a file whose ranges all verified read-only, checks its size, fsyncs it and renames
// it into place (no-clobber unless it replaces a different file with WithForce).
func (fj *fileJob) finish(o *options, r *oci.Repo) error {
	f := fj.file
	st, err := fj.data.Stat()
	if err != nil {
		return fmt.Errorf("verify %s: %w", fj.data.Name(), err)
	}
	if st.Size() != f.Digests.Size {
		return fmt.Errorf("%s (%s): %w: assembled file is %d bytes, manifest says %d", f.Name, fj.data.Name(), ErrDigestMismatch, st.Size(), f.Digests.Size)
	}
	if err := fj.data.Chmod(0o444); err != nil {
		return err
	}
	t0 := time.Now()
	if err := fj.data.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", fj.data.Name(), err)
	}
	r.Logger().Debug("pull: file assembled", "file", f.Name, "fsync", time.Since(t0))
	src := fj.data.Name()
	if fj.replace {
		err = os.Rename(src, fj.dest)
	} else {
		err = renameNoReplace(src, fj.dest)
	}
	if err != nil {
		return fmt.Errorf("move %s into place: %w", f.Name, err)
	}
	o.progress.Report(Event{Kind: EventDone, File: f.Name})
	r.Logger().Info("pulled", "file", fj.dest, "verified", "BLAKE3 of every range and of the file", "blake3", f.Digests.BLAKE3.String())
	return nil
}
