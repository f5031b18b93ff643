package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"

	v1 "github.com/google/go-containerregistry/pkg/v1"
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
// under dir/.orkpipe-partial; each whole file is then checked (its size and BLAKE3, recomputed from
// the assembled bytes; see Verification for manifests without a BLAKE3 annotation) and only then made
// read-only and renamed into dir. A killed pull resumes from the parts it had verified. A file already
// in dir is kept only if its digests match; a different one is an error (ErrExists) unless WithForce.
// With WithTrust, the artifact must carry a provenance attestation signed by a trusted key that
// names this manifest; otherwise nothing is downloaded.
func Pull(ctx context.Context, ref, dir string, opts ...Option) (*PullResult, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, err
	}
	t, err := newTarget(ctx, ref, o, false)
	if err != nil {
		return nil, err
	}
	art, err := t.fetchArtifact(ctx)
	if err != nil {
		return nil, err
	}
	res := &PullResult{Digest: art.Digest, Artifact: art}
	if len(o.trust) > 0 {
		if res.Attestations, err = t.trusted(ctx, art); err != nil {
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
		// The whole-file hashers follow the parts as they are verified (outside the job limit: they
		// wait for parts, and a part must never wait for them).
		fj.whole = startWholeFile(gctx, fj.data, fj.file)
		for _, i := range fj.resumed {
			fj.whole.partReady(i)
		}
		if fj.pending.Load() == 0 {
			g.Go(func() error { return fj.finish(gctx, o) })
			continue
		}
		for _, p := range fj.todo {
			g.Go(func() error {
				if err := pullPart(gctx, t, fj, p, &downloaded); err != nil {
					o.progress.Report(Event{Kind: EventDone, File: fj.file.Name, Err: err})
					return err
				}
				if err := state.record(fj.file.Name, p); err != nil {
					return err
				}
				startWriteback(fj.data, p.Extents)
				fj.whole.partReady(p.Index)
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
	if err := syncDir(dir); err != nil {
		return res, err
	}
	return res, state.remove()
}

// fetchArtifact gets and parses the manifest ref names.
func (t *target) fetchArtifact(ctx context.Context) (*Artifact, error) {
	desc, err := remote.Get(t.ref, t.remote...)
	if err != nil {
		return nil, fmt.Errorf("get manifest %s: %w", t.ref, err)
	}
	art, err := ParseManifest(desc.Manifest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.ref, err)
	}
	if art.Digest != desc.Digest {
		return nil, fmt.Errorf("%s: %w: manifest bytes hash to %s, registry says %s", t.ref, ErrDigestMismatch, art.Digest, desc.Digest)
	}
	return art, nil
}

// trusted returns the provenance attestations of art validly signed by a trusted key, or ErrUntrusted
// naming what was found instead.
func (t *target) trusted(ctx context.Context, art *Artifact) ([]Attestation, error) {
	atts, err := t.attestations(ctx, art.Digest)
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
		return nil, fmt.Errorf("%s (%s): %w: %w", t.ref, art.Digest, ErrUntrusted, errors.Join(why...))
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
	whole     *wholeFile // whole-file digests, computed as parts are verified
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
	for _, p := range f.Parts {
		if state.recorded(f.Name, p) && checkLocal(ctx, data, p) {
			fj.result.Resumed++
			fj.resumed = append(fj.resumed, p.Index)
			continue
		}
		fj.todo = append(fj.todo, p)
		fj.todoBytes += p.Layer.Size
	}
	fj.pending.Store(int64(len(fj.todo)))
	return fj, nil
}

// pullPart downloads part p into fj's partial file, retrying transient failures and corrupt
// transfers; the error names the file, part and layer digest.
func pullPart(ctx context.Context, t *target, fj *fileJob, p Part, downloaded *atomic.Int64) error {
	var err error
	for attempt := 1; attempt <= t.o.retries; attempt++ {
		err = fetchPart(ctx, t, fj, p, downloaded)
		if err == nil {
			return nil
		}
		if !transient(err) || ctx.Err() != nil {
			break
		}
		t.o.logger.Warn("retrying layer download", "file", fj.file.Name, "part", p.Index, "digest", p.Layer.Digest.String(), "attempt", attempt, "err", err)
		backoff(ctx, attempt)
	}
	return fmt.Errorf("pull %s part %d/%d (layer %s): %w", fj.file.Name, p.Index, len(fj.file.Parts), p.Layer.Digest, err)
}

// fetchPart streams one layer: stored bytes are hashed as they arrive, decoded when compressed,
// hashed again and written at the part's extents; the part counts as verified only if the stored
// digest and size and the decoded digest and size all match. Its bytes are not synced here: a
// resumed pull re-hashes journaled parts from disk, and the finished file is fsynced before its rename.
func fetchPart(ctx context.Context, t *target, fj *fileJob, p Part, downloaded *atomic.Int64) error {
	d := p.Layer.Digest.String()
	rr := &resumingReader{ctx: ctx, t: t, digest: d, size: p.Layer.Size, max: t.o.retries}
	defer rr.Close()
	storedH := sha256.New()
	count := func(n int64) {
		downloaded.Add(n)
		t.o.progress.Report(Event{Kind: EventBytes, File: fj.file.Name, Bytes: n})
	}
	er := &errReader{r: rr}
	src := io.TeeReader(&countingReader{r: er, count: count}, storedH)
	data := src
	var dec *zstd.Decoder
	if p.Compressed() {
		var err error
		if dec, err = zstd.NewReader(src, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true)); err != nil {
			return err
		}
		defer dec.Close()
		data = dec
	}
	// Uncompressed, the decoded bytes are the stored bytes: storedH (fed by the tee) covers both.
	rawH := storedH
	var w io.Writer = &extentWriter{f: fj.data, exts: p.Extents}
	if dec != nil {
		rawH = sha256.New()
		w = io.MultiWriter(w, rawH)
	}
	n, copyErr := io.CopyBuffer(w, io.LimitReader(data, p.RawSize), make([]byte, 1<<20))
	if copyErr == nil && dec != nil {
		var one [1]byte
		if m, _ := io.ReadFull(dec, one[:]); m != 0 {
			copyErr = fmt.Errorf("%w: layer decodes to more than %d bytes", ErrDigestMismatch, p.RawSize)
		}
	}
	var rest int64
	if copyErr == nil || dec != nil {
		rest, _ = io.Copy(io.Discard, src) // hash every stored byte, also after a decode error
	}
	if er.err != nil { // the transfer itself failed (after the reader's own resumptions)
		return er.err
	}
	got := "sha256:" + hex.EncodeToString(storedH.Sum(nil))
	if got != d || rr.off != p.Layer.Size {
		return fmt.Errorf("%w: received %d bytes hashing to %s, want %d bytes %s", ErrDigestMismatch, rr.off, got, p.Layer.Size, d)
	}
	if copyErr != nil {
		// The stored bytes are what the manifest names, yet they do not decode: the artifact is bad.
		return fmt.Errorf("layer content invalid: %v", copyErr)
	}
	if rest != 0 && dec == nil {
		return fmt.Errorf("%w: %d bytes beyond the part's extents", ErrDigestMismatch, rest)
	}
	if raw := "sha256:" + hex.EncodeToString(rawH.Sum(nil)); n != p.RawSize || raw != p.RawSHA256 {
		return fmt.Errorf("layer content invalid: decoded %d bytes hashing to %s, want %d bytes %s", n, raw, p.RawSize, p.RawSHA256)
	}
	return nil
}

// finish verifies the assembled file whole (the digest its hasher computed from the bytes on disk,
// part after verified part; see Verification), makes it read-only, fsyncs it and renames it into place.
func (fj *fileJob) finish(ctx context.Context, o *options) error {
	f := fj.file
	d, err := fj.whole.wait(ctx)
	if err != nil {
		return fmt.Errorf("verify %s: %w", fj.data.Name(), err)
	}
	if d.Size != f.Digests.Size {
		return fmt.Errorf("%s: %w: assembled file is %d bytes, manifest says %d", f.Name, ErrDigestMismatch, d.Size, f.Digests.Size)
	}
	switch fj.whole.kind {
	case VerifiedBLAKE3:
		if d.BLAKE3 != f.Digests.BLAKE3 {
			return fmt.Errorf("%s: %w: assembled file's BLAKE3 is %s, manifest says %s", f.Name, ErrDigestMismatch, d.BLAKE3, f.Digests.BLAKE3)
		}
	case VerifiedSHA256:
		if d.SHA256 != f.Digests.SHA256 {
			return fmt.Errorf("%s: %w: assembled file's sha256 is %s, manifest says %s (the manifest has no BLAKE3 annotation)", f.Name, ErrDigestMismatch, d.SHA256, f.Digests.SHA256)
		}
	}
	if err := fj.data.Chmod(0o444); err != nil {
		return err
	}
	if err := fj.data.Sync(); err != nil {
		return err
	}
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
	switch fj.whole.kind {
	case VerifiedBLAKE3:
		o.logger.Info("pulled", "file", fj.dest, "verified", "parts sha256 + file blake3", "blake3", f.Digests.BLAKE3.String())
	case VerifiedSHA256:
		o.logger.Warn("pulled; the manifest has no BLAKE3 annotation", "file", fj.dest, "verified", "parts sha256 + file sha256", "sha256", f.Digests.SHA256)
	default:
		o.logger.Warn("pulled; the manifest has no whole-file digest annotation", "file", fj.dest, "verified", "parts sha256 only")
	}
	return nil
}

// errReader remembers the first non-EOF error of r, to tell a failed transfer from bad content.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}
