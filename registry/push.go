package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sync/errgroup"

	"orkpipe/registry/oci"
)

// PushResult describes a finished push.
type PushResult struct {
	Ref         string  // the reference pushed to (tag or digest form, as given)
	Digest      v1.Hash // manifest digest
	Artifact    *Artifact
	Uploaded    int64    // layer bytes sent
	Reused      int64    // layer bytes the registry already had
	Attestation *v1.Hash // the signed provenance attestation, when WithSigner was given
}

// Push publishes every regular file of dir (top level, sorted by name; hidden files are skipped)
// as one ModelPack artifact at ref. Files larger than the part size become several byte-range
// layers; sparse files send only their data; compressible files are zstd-compressed. Layers upload
// in parallel (WithJobs). The manifest is deterministic: the same files, options and provenance give
// the same digest. With WithSigner, provenance.json is attached as a signed attestation.
func Push(ctx context.Context, dir, ref string, opts ...Option) (*PushResult, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, err
	}
	paths, err := listDir(dir)
	if err != nil {
		return nil, err
	}
	model, created := o.model, o.created
	var prov *provenance
	if _, err := os.Stat(filepath.Join(dir, ProvenanceFile)); err == nil {
		if prov, err = readProvenance(filepath.Join(dir, ProvenanceFile)); err != nil {
			return nil, err
		}
		model = model.merge(prov.model)
		if created.IsZero() {
			created = prov.created
		}
	}
	// created comes from the build (WithCreated or the provenance's finishedOn), never from the wall
	// clock; a build whose provenance records no time gets a manifest without one.
	if o.signer != nil && prov == nil {
		return nil, fmt.Errorf("%s: signing needs %s (the provenance to attest)", dir, ProvenanceFile)
	}
	r, err := oci.Open(ctx, ref, true, o.conn...)
	if err != nil {
		return nil, err
	}

	// Pass 1: layout and digests, files in parallel.
	files := make([]*localFile, len(paths))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.jobs)
	for i, p := range paths {
		g.Go(func() error {
			lf, err := prepareFile(gctx, p, o)
			files[i] = lf
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	cfg, err := configFor(model, created, files)
	if err != nil {
		return nil, err
	}
	res := &PushResult{Ref: ref}

	// Pass 2: upload config and layers.
	cfgDesc, err := r.PutBlob(ctx, cfg, MediaTypeModelConfig)
	if err != nil {
		return nil, fmt.Errorf("push config: %w", err)
	}
	var uploaded, reused atomic.Int64
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(o.jobs)
	for _, lf := range files {
		o.progress.Report(Event{Kind: EventStart, File: lf.Name, Total: lf.StoredSize()})
		remaining := atomic.Int64{}
		remaining.Store(int64(len(lf.Parts)))
		for _, p := range lf.Parts {
			g.Go(func() error {
				err := pushPart(gctx, r, o, lf, p, &uploaded, &reused)
				if err != nil {
					o.progress.Report(Event{Kind: EventDone, File: lf.Name, Err: err})
					return err
				}
				if remaining.Add(-1) == 0 {
					o.progress.Report(Event{Kind: EventDone, File: lf.Name})
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	res.Uploaded, res.Reused = uploaded.Load(), reused.Load()

	raw, err := manifestFor(cfgDesc, model, created, files)
	if err != nil {
		return nil, err
	}
	art, err := ParseManifest(raw) // verify on write: what we push must parse as what we pull
	if err != nil {
		return nil, fmt.Errorf("internal: generated manifest does not validate: %w", err)
	}
	res.Artifact, res.Digest = art, art.Digest
	tag := ""
	switch nr := r.Ref().(type) {
	case name.Digest:
		if nr.DigestStr() != art.Digest.String() {
			return nil, fmt.Errorf("reference %s names digest %s but the manifest is %s", ref, nr.DigestStr(), art.Digest)
		}
	case name.Tag:
		tag = nr.TagStr()
	}
	if _, err := r.PutManifest(ctx, tag, raw); err != nil {
		return nil, err
	}
	o.logger.Info("pushed", "ref", ref, "digest", art.Digest.String(), "uploaded", res.Uploaded, "reused", res.Reused)

	if o.signer != nil {
		subject := v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: int64(len(raw)), Digest: art.Digest}
		st := statementFor(r.Name(), art.Digest, art.Files, prov.statement.PredicateType, prov.statement.Predicate)
		h, err := attach(ctx, r, subject, st, o.signer)
		if err != nil {
			return nil, err
		}
		res.Attestation = &h
	}
	return res, nil
}

// pushPart uploads one layer, retrying transient failures (a chunked upload also resumes within
// an attempt). The registry checks the sha256 of the bytes sent: a file changed since pass 1
// hashed it is refused (ErrDigestMismatch) and never retried.
func pushPart(ctx context.Context, r *oci.Repo, o *options, lf *localFile, p Part, uploaded, reusedBytes *atomic.Int64) error {
	d := p.Layer.Digest.String()
	blob := oci.Blob{Digest: d, Size: p.Layer.Size,
		Open: func(off int64) (io.ReadCloser, error) { return lf.openPartAt(p, off) },
		Sent: func(n int64) { o.progress.Report(Event{Kind: EventBytes, File: lf.Name, Bytes: n}) }}
	var err error
	for attempt := 1; attempt <= o.retries; attempt++ {
		var reused bool
		reused, err = r.Upload(ctx, blob)
		if err == nil {
			if reused {
				reusedBytes.Add(p.Layer.Size)
			} else {
				uploaded.Add(p.Layer.Size)
			}
			return nil
		}
		if !oci.Transient(err) || errors.Is(err, ErrDigestMismatch) || ctx.Err() != nil {
			break
		}
		o.logger.Warn("retrying layer upload", "file", lf.Name, "part", p.Index, "digest", d, "attempt", attempt, "err", err)
		oci.Backoff(ctx, attempt)
	}
	return fmt.Errorf("push %s part %d/%d (layer %s): %w", lf.Name, p.Index, len(lf.Parts), d, err)
}

// listDir returns the regular files at the top of dir, sorted. Hidden entries (including the
// .orkpipe-partial state of a pull) are skipped; anything else that is not a regular file is an error.
func listDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Name()[0] == '.' {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%s: not a regular file (directories and links are not pushed)", filepath.Join(dir, e.Name()))
		}
		if err := validName(e.Name()); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
		}
		out = append(out, filepath.Join(dir, e.Name()))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no files to push", dir)
	}
	sort.Strings(out)
	return out, nil
}

// configFor returns the ModelPack config blob.
func configFor(m ModelInfo, created time.Time, files []*localFile) ([]byte, error) {
	var c ModelConfig
	if !created.IsZero() {
		c.Descriptor.CreatedAt = &created
	}
	c.Descriptor.Name, c.Descriptor.Version, c.Descriptor.Revision = m.Name, m.Version, m.Revision
	c.Config.Architecture, c.Config.Format = m.Architecture, "orkpack"
	c.Config.ParamSize, c.Config.Precision, c.Config.Quantization = m.ParamSize, m.Precision, m.Quantization
	c.ModelFS.Type = "layers"
	c.ModelFS.DiffIDs = []string{}
	for _, lf := range files {
		for _, p := range lf.Parts {
			c.ModelFS.DiffIDs = append(c.ModelFS.DiffIDs, p.RawSHA256)
		}
	}
	return json.Marshal(c)
}

// manifestFor returns the pack manifest bytes: layers in file-name then part order, annotations
// from the model info and build time only (no wall clock).
func manifestFor(cfg v1.Descriptor, m ModelInfo, created time.Time, files []*localFile) ([]byte, error) {
	ann := map[string]string{AnnotationFormat: FormatVersion}
	if !created.IsZero() {
		ann[AnnotationCreated] = created.UTC().Format(time.RFC3339Nano)
	}
	set := func(k, v string) {
		if v != "" {
			ann[k] = v
		}
	}
	set(AnnotationTitle, m.Name)
	set(AnnotationVersion, m.Version)
	set(AnnotationRevision, m.Revision)
	set(AnnotationBoardProfile, m.BoardProfile)
	set(AnnotationRecipe, m.Recipe)
	man := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactTypeModel,
		Config:        cfg,
		Layers:        []v1.Descriptor{},
		Annotations:   ann,
	}
	for _, lf := range files {
		for _, p := range lf.Parts {
			man.Layers = append(man.Layers, p.Layer)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(man); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
