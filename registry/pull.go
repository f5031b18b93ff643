package registry

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"orkpipe/registry/oci"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"orkpipe/artifacts"
)

// PullResult describes a finished pull.
type PullResult struct {
	Digest       v1.Hash
	Artifact     *Artifact
	Files        []PulledFile
	Downloaded   int64         // layer bytes received (retries included)
	Attestations []Attestation // verified provenance attestations, when WithTrust was given
}

// PulledFile is one file of a pull.
type PulledFile struct {
	Name    string
	Path    string
	Skipped bool // already present with the right digests
	Resumed int  // parts reused from an interrupted pull (re-verified on disk)
	// Verified names the whole-file check applied after the per-part checks: VerifiedBLAKE3 for
	// every orkpipe push; VerifiedSHA256 or VerifiedParts for a manifest lacking the annotations.
	// A Skipped file was not downloaded: its sha256 and BLAKE3 were both recomputed and compared
	// with every whole-file digest the manifest records (never skipped under VerifiedParts).
	Verified Verification
}

// Pull downloads the artifact at ref into dir. Layers download in parallel; every layer is checked
// (sha256 of the stored bytes, size, sha256 of the decoded bytes) as it streams into a sparse file
// under dir/.orkpipe-partial; each whole file is then checked (its size and BLAKE3, hashed from the
// verified parts' bytes as they were written; see Verification for manifests without a BLAKE3
// annotation) and only then made read-only, fsynced and renamed into dir. A killed pull resumes from
// the parts it had verified. A file already in dir is kept only if its digests match; a different
// one is an error (ErrExists) unless WithForce, and is replaced only by that final rename.
// With WithTrust, the artifact must carry a provenance attestation signed by a trusted key that
// names this manifest; otherwise nothing is downloaded.
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

	jobs := []*fileJob{}
	for _, f := range art.Files {
		fj, err := prepareDest(ctx, dir, f, state, o)
		if err != nil {
			return nil, err
		}
		res.Files = append(res.Files, fj.result)
		if fj.result.Skipped {
			o.progress.Report(Event{Kind: EventSkipped, File: f.Name})
			continue
		}
		jobs = append(jobs, fj)
	}
	defer func() {
		for _, fj := range jobs {
			fj.data.Close()
		}
	}()

	var downloaded atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.jobs)
	for _, fj := range jobs {
		o.progress.Report(Event{Kind: EventStart, File: fj.file.Name, Total: fj.todoBytes})
		// The whole-file check's background work (hole pieces, or the sha256 follower) runs outside
		// the job limit: the follower waits for parts, and a part must never wait for it.
		fj.startVerify(gctx)
		if fj.pending.Load() == 0 {
			g.Go(func() error { return fj.finish(gctx, o) })
			continue
		}
		for _, p := range fj.todo {
			g.Go(func() error {
				pt, err := pullPart(gctx, r, o, fj, p, &downloaded)
				if err != nil {
					o.progress.Report(Event{Kind: EventDone, File: fj.file.Name, Err: err})
					return err
				}
				if err := state.record(fj.file.Name, p); err != nil {
					return err
				}
				startWriteback(fj.data, p.Extents)
				fj.partVerified(p.Index, pt)
				if fj.pending.Add(-1) == 0 {
					return fj.finish(gctx, o)
				}
				return nil
			})
		}
	}
	err = g.Wait()
	res.Downloaded = downloaded.Load()
	if err != nil {
		return res, err
	}
	if err := artifacts.SyncDir(dir); err != nil {
		return res, err
	}
	return res, state.remove()
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
	atts, err := attestations(ctx, r, o, art.Digest)
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
			why = append(why, errors.New("no attestations attached"))
		}
		return nil, fmt.Errorf("%s (%s): %w: %w", r.Ref(), art.Digest, ErrUntrusted, errors.Join(why...))
	}
	return ok, nil
}

// filesMatch checks that the signed statement's file subjects agree with the manifest's files (as
// strings: pull recomputes each file's BLAKE3, not its sha256, which equals the signed and annotated
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
	data      *os.File
	todo      []Part
	todoBytes int64
	pending   atomic.Int64
	result    PulledFile
	resumed   []int      // indexes of the parts reused from an interrupted pull
	tree      *fileTree  // the whole-file BLAKE3, from the verified parts' bytes (VerifiedBLAKE3)
	whole     *wholeFile // the whole-file sha256, read back as parts are verified (VerifiedSHA256)
}

// prepareDest checks an existing destination and opens (or resumes) the partial file.
func prepareDest(ctx context.Context, dir string, f File, state *partialState, o *options) (*fileJob, error) {
	fj := &fileJob{file: f, dest: filepath.Join(dir, f.Name)}
	fj.result = PulledFile{Name: f.Name, Path: fj.dest, Verified: f.Digests.verification()}
	if st, err := os.Lstat(fj.dest); err == nil {
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: exists and is not a regular file", fj.dest)
		}
		d, err := hashPath(ctx, fj.dest)
		if err != nil {
			return nil, err
		}
		if f.Digests.matches(d) {
			fj.result.Skipped = true
			return fj, nil
		}
		if !o.force {
			return nil, fmt.Errorf("%s: %w: it is %d bytes %s %s, the artifact's file is %d bytes %s %s (use force to replace it)",
				fj.dest, ErrExists, d.Size, d.SHA256, d.BLAKE3, f.Digests.Size, orNone(f.Digests.SHA256), orNone(blake3String(f.Digests.BLAKE3)))
		}
		fj.replace = true
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	data, err := os.OpenFile(state.dataPath(f.Name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := data.Truncate(f.Digests.Size); err != nil {
		data.Close()
		return nil, fmt.Errorf("%s: %w", data.Name(), err)
	}
	fj.data = data
	if fj.result.Verified == VerifiedBLAKE3 {
		if fj.tree, err = newFileTree(f); err != nil {
			return nil, err
		}
	}
	for _, p := range f.Parts {
		if state.recorded(f.Name, p) {
			pt := fj.newPartTree(p.Index)
			if checkLocal(ctx, data, p, pt) {
				fj.result.Resumed++
				fj.resumed = append(fj.resumed, p.Index)
				fj.partVerified(p.Index, pt)
				continue
			}
		}
		fj.todo = append(fj.todo, p)
		fj.todoBytes += p.Layer.Size
	}
	fj.pending.Store(int64(len(fj.todo)))
	return fj, nil
}

// finish verifies the assembled file whole (its size on disk, and the digest its Verification
// names: the BLAKE3 merged from the verified parts' pieces, or the sha256 its follower read back),
// makes it read-only, fsyncs it and renames it into place. Errors name the file, the partial
// file's path and both digests.
func (fj *fileJob) finish(ctx context.Context, o *options) error {
	f := fj.file
	t0 := time.Now()
	d, err := fj.wholeDigest(ctx)
	tHash := time.Since(t0)
	if err != nil {
		return fmt.Errorf("verify %s: %w", fj.data.Name(), err)
	}
	st, err := fj.data.Stat()
	if err != nil {
		return fmt.Errorf("verify %s: %w", fj.data.Name(), err)
	}
	if st.Size() != f.Digests.Size || d.Size != f.Digests.Size {
		return fmt.Errorf("%s (%s): %w: assembled file is %d bytes (%d hashed), manifest says %d", f.Name, fj.data.Name(), ErrDigestMismatch, st.Size(), d.Size, f.Digests.Size)
	}
	switch fj.result.Verified {
	case VerifiedBLAKE3:
		if d.BLAKE3 != f.Digests.BLAKE3 {
			return fmt.Errorf("%s (%s): %w: assembled file's BLAKE3 is %s, manifest says %s", f.Name, fj.data.Name(), ErrDigestMismatch, d.BLAKE3, f.Digests.BLAKE3)
		}
	case VerifiedSHA256:
		if d.SHA256 != f.Digests.SHA256 {
			return fmt.Errorf("%s (%s): %w: assembled file's sha256 is %s, manifest says %s (the manifest has no BLAKE3 annotation)", f.Name, fj.data.Name(), ErrDigestMismatch, d.SHA256, f.Digests.SHA256)
		}
	}
	if err := fj.data.Chmod(0o444); err != nil {
		return err
	}
	t1 := time.Now()
	if err := fj.data.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", fj.data.Name(), err)
	}
	o.logger.Debug("pull: file assembled", "file", f.Name, "whole-file digest wait", tHash, "fsync", time.Since(t1))
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
	switch fj.result.Verified {
	case VerifiedBLAKE3:
		o.logger.Info("pulled", "file", fj.dest, "verified", "parts sha256 + file blake3", "blake3", f.Digests.BLAKE3.String())
	case VerifiedSHA256:
		o.logger.Warn("pulled; the manifest has no BLAKE3 annotation", "file", fj.dest, "verified", "parts sha256 + file sha256", "sha256", f.Digests.SHA256)
	default:
		o.logger.Warn("pulled; the manifest has no whole-file digest annotation", "file", fj.dest, "verified", "parts sha256 only")
	}
	return nil
}
