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
	"runtime"
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
	Uploaded    int64    // layer bytes sent (a resumed upload counts what it sent again)
	Reused      int64    // layer bytes the registry already had
	Attestation *v1.Hash // the signed provenance attestation, when WithSigner was given
}

// Push publishes every regular file of dir (top level, sorted by name; hidden files are skipped)
// as one ModelPack artifact at ref, one layer per file (docs/oci.md). A file travels raw, or as a
// tar archive where leaving its holes out or compressing it pays. Its digests come from
// WithDigests (the store remembers them: a build output is not hashed again) or are computed in
// one read. Files upload in parallel (WithJobs), each as one blob, in resumable chunks when large.
// The manifest is deterministic: the same files, range size and provenance give the same digest.
// With WithSigner, provenance.json is attached as a signed attestation.
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
	// slots bounds the zstd frames being compressed or held across the whole push.
	slots := make(chan struct{}, max(1, min(o.jobs, runtime.GOMAXPROCS(0))))

	// Pass 1: layout and digests, files in parallel.
	files := make([]*localFile, len(paths))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.jobs)
	for i, p := range paths {
		g.Go(func() error {
			lf, err := prepareFile(gctx, p, o, slots)
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
		g.Go(func() error {
			o.progress.Report(Event{Kind: EventStart, File: lf.Name, Total: lf.Layer.Size})
			err := pushFile(gctx, r, o, lf, slots, &uploaded, &reused)
			o.progress.Report(Event{Kind: EventDone, File: lf.Name, Err: err})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	res.Uploaded, res.Reused = uploaded.Load(), reused.Load()
	for _, lf := range files { // what was uploaded is what was hashed: the files did not change
		if err := sameFile(lf.path, lf.st); err != nil {
			return nil, err
		}
	}

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
	r.Logger().Info("pushed", "ref", ref, "digest", art.Digest.String(), "uploaded", res.Uploaded, "reused", res.Reused)

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

// pushFile uploads one file's layer, retrying transient failures (a chunked upload also resumes
// within an attempt). The registry checks the sha256 of the bytes sent: bytes that changed since
// they were hashed, or a wrong remembered digest, are refused (ErrDigestMismatch) and not retried.
func pushFile(ctx context.Context, r *oci.Repo, o *options, lf *localFile, slots chan struct{}, uploaded, reusedBytes *atomic.Int64) error {
	d := lf.Layer.Digest.String()
	blob := oci.Blob{Digest: d, Size: lf.Layer.Size,
		Open: func(off int64) (io.ReadCloser, error) { return lf.openStored(ctx, off, slots) },
		Sent: func(n int64) { o.progress.Report(Event{Kind: EventBytes, File: lf.Name, Bytes: n}) }}
	var err error
	for attempt := 1; attempt <= r.Retries(); attempt++ {
		var reused bool
		if reused, err = r.Upload(ctx, blob); err == nil {
			if reused {
				reusedBytes.Add(lf.Layer.Size)
			} else {
				uploaded.Add(lf.Layer.Size)
			}
			return nil
		}
		if errors.Is(err, ErrDigestMismatch) && ctx.Err() == nil {
			if fg, ok := o.digests.(digestForgetter); ok && lf.Form == FormRaw {
				fg.ForgetDigests(lf.Digests.BLAKE3)
				err = fmt.Errorf("%w (the digests remembered for it were dropped: if the file did not change, push again)", err)
			}
			break
		}
		if !oci.Transient(err) || ctx.Err() != nil {
			break
		}
		r.Logger().Warn("retrying layer upload", "file", lf.Name, "digest", d, "attempt", attempt, "err", err)
		oci.Backoff(ctx, attempt)
	}
	return fmt.Errorf("push %s (layer %s): %w", lf.Name, d, err)
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

// configFor returns the ModelPack config blob; its diffIds are the layers' uncompressed sha256.
func configFor(m ModelInfo, created time.Time, files []*localFile) ([]byte, error) {
	var c ModelConfig
	if !created.IsZero() {
		c.Descriptor.CreatedAt = &created
	}
	c.Descriptor.Name, c.Descriptor.Version, c.Descriptor.Revision = m.Name, m.Version, m.Revision
	c.Descriptor.Family, c.Descriptor.Vendor, c.Descriptor.Description = m.Family, m.Vendor, m.Description
	c.Descriptor.DocURL, c.Descriptor.SourceURL = m.DocURL, m.SourceURL
	if m.Author != "" {
		c.Descriptor.Authors = []string{m.Author}
	}
	if m.License != "" {
		c.Descriptor.Licenses = []string{m.License}
	}
	c.Config.Architecture, c.Config.Format = m.Architecture, "orkpack"
	c.Config.ParamSize, c.Config.Precision, c.Config.Quantization = m.ParamSize, m.Precision, m.Quantization
	c.ModelFS.Type = "layers"
	c.ModelFS.DiffIDs = []string{}
	for _, lf := range files {
		c.ModelFS.DiffIDs = append(c.ModelFS.DiffIDs, lf.DiffID)
	}
	return json.Marshal(c)
}

// manifestFor returns the pack manifest bytes: one layer per file in file-name order,
// annotations from the model info and build time only (no wall clock).
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
	set(AnnotationAuthors, m.Author)
	set(AnnotationVendor, m.Vendor)
	set(AnnotationLicenses, m.License)
	set(AnnotationDescription, m.Description)
	set(AnnotationDocumentation, m.DocURL)
	set(AnnotationSource, m.SourceURL)
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
		man.Layers = append(man.Layers, lf.Layer)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(man); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
