// Package cacherepo is the remote build cache's object store: node results (action records and
// their output objects) kept in one registry repository, so that another machine, or a cleared
// local cache, reuses them. The engine side (a miss is looked up here, a result published here) is
// pipelines/remotecache.
//
// # Layout (docs/oci.md, "Remote build cache")
//
//	tag "action-<hex node key>" -> OCI image manifest
//	    artifactType  application/vnd.dev.orkpipe.action.v1+json
//	    config        the artifacts.ActionRecord JSON (same media type)
//	    layers        one per output, in record order: application/vnd.dev.orkpipe.object.v1,
//	                  annotations org.opencontainers.image.title = output name,
//	                  dev.orkpipe.object.blake3 = the object's BLAKE3 digest
//
// A layer's digest is the object's sha256, which the local store remembers beside the object
// (artifacts.Store.Digests): publishing an object hashes it at most once per store, and an object
// the repository already holds is not read at all. Every fetched object is verified twice while it
// streams into the local store: sha256 against the layer digest, BLAKE3 and size against the record
// (artifacts.Store.IngestExpect); a corrupt or truncated download stores nothing.
package cacherepo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"orkpipe/artifacts"
	"orkpipe/registry/oci"
)

// Media types and annotation keys of the layout.
const (
	MediaTypeAction    = "application/vnd.dev.orkpipe.action.v1+json"
	MediaTypeObject    = "application/vnd.dev.orkpipe.object.v1"
	AnnotationTitle    = "org.opencontainers.image.title"
	AnnotationObjectB3 = "dev.orkpipe.object.blake3"
	maxRecordBytes     = 4 << 20
)

// ErrInvalid: a manifest or record in the repository does not describe the node asked for.
var ErrInvalid = errors.New("invalid remote cache entry")

// Repo is a registry repository used as a remote build cache.
type Repo struct {
	r *oci.Repo
}

// Open connects to repo ("registry/name") for reading and writing.
func Open(ctx context.Context, repo string, opts ...oci.Option) (*Repo, error) {
	r, err := oci.Open(ctx, repo+":cache", true, opts...)
	if err != nil {
		return nil, err
	}
	return &Repo{r: r}, nil
}

func tag(key artifacts.Digest) string { return "action-" + key.Hex() }

// PutAction uploads rec's outputs from store and then rec itself, tagged by its key. An output the
// repository already holds is not sent (nor read); one it lacks is read through the store's
// verifying reader, and the registry checks its sha256.
func (c *Repo) PutAction(ctx context.Context, store *artifacts.Store, rec artifacts.ActionRecord) error {
	recJSON, err := artifacts.EncodeActionRecord(rec)
	if err != nil {
		return fmt.Errorf("remote cache put %s: %w", rec.Key, err)
	}
	layers := []v1.Descriptor{}
	for _, out := range rec.Outputs {
		od, err := store.Digests(ctx, out.Digest)
		if err != nil {
			return fmt.Errorf("remote cache put %s: output %s (%s): %w", rec.Key, out.Name, out.Digest, err)
		}
		if od.Size != out.Size {
			return fmt.Errorf("remote cache put %s: output %s (%s) has %d bytes, record says %d", rec.Key, out.Name, out.Digest, od.Size, out.Size)
		}
		d := od.SHA256String()
		open := func(off int64) (io.ReadCloser, error) { return openAt(ctx, store, out.Digest, off) }
		if _, err := c.r.Upload(ctx, oci.Blob{Digest: d, Size: od.Size, Open: open}); err != nil {
			return fmt.Errorf("remote cache put %s: output %s: %w", rec.Key, out.Name, err)
		}
		h, _ := v1.NewHash(d)
		layers = append(layers, v1.Descriptor{MediaType: MediaTypeObject, Size: od.Size, Digest: h,
			Annotations: map[string]string{AnnotationTitle: out.Name, AnnotationObjectB3: out.Digest.String()}})
	}
	cfg, err := c.r.PutBlob(ctx, recJSON, MediaTypeAction)
	if err != nil {
		return fmt.Errorf("remote cache put %s: record: %w", rec.Key, err)
	}
	raw, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: MediaTypeAction, Config: cfg, Layers: layers})
	if err != nil {
		return err
	}
	if _, err := c.r.PutManifest(ctx, tag(rec.Key), raw); err != nil {
		return fmt.Errorf("remote cache put %s: %w", rec.Key, err)
	}
	return nil
}

// openAt returns the object's bytes from off: through the store's verifying reader (which checks
// the whole object at EOF) when off is 0, else a plain read of the read-only object file (a resumed
// upload, which the registry verifies by the sha256).
func openAt(ctx context.Context, store *artifacts.Store, d artifacts.Digest, off int64) (io.ReadCloser, error) {
	if off == 0 {
		return store.Open(ctx, d)
	}
	rc, err := store.Open(ctx, d)
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, rc, off); err != nil {
		rc.Close()
		return nil, err
	}
	return rc, nil
}

// GetAction fetches the record of key and makes sure every output is in store, downloading and
// verifying the missing ones. A key the repository does not have is an error wrapping
// artifacts.ErrNotFound (a miss). The record is returned, not stored: the caller records it with
// store.PutAction once it accepts the hit.
func (c *Repo) GetAction(ctx context.Context, store *artifacts.Store, key artifacts.Digest) (artifacts.ActionRecord, error) {
	var none artifacts.ActionRecord
	raw, _, err := c.r.GetManifest(ctx, tag(key))
	if errors.Is(err, oci.ErrManifestUnknown) {
		return none, fmt.Errorf("remote cache %s: %w", key, artifacts.ErrNotFound)
	}
	if err != nil {
		return none, fmt.Errorf("remote cache get %s: %w", key, err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return none, fmt.Errorf("remote cache get %s: manifest: %w", key, err)
	}
	if m.ArtifactType != MediaTypeAction || string(m.Config.MediaType) != MediaTypeAction {
		return none, fmt.Errorf("remote cache get %s: %w: not an action manifest", key, ErrInvalid)
	}
	b, err := c.r.ReadBlob(ctx, m.Config, maxRecordBytes)
	if err != nil {
		return none, fmt.Errorf("remote cache get %s: record: %w", key, err)
	}
	rec, err := artifacts.DecodeActionRecord(b)
	if err != nil {
		return none, fmt.Errorf("remote cache get %s: record: %w", key, err)
	}
	if rec.Key != key {
		return none, fmt.Errorf("remote cache get %s: %w: record is for key %s", key, ErrInvalid, rec.Key)
	}
	if len(m.Layers) != len(rec.Outputs) {
		return none, fmt.Errorf("remote cache get %s: %w: %d layers for %d outputs", key, ErrInvalid, len(m.Layers), len(rec.Outputs))
	}
	for i, out := range rec.Outputs {
		l := m.Layers[i]
		if l.Annotations[AnnotationObjectB3] != out.Digest.String() || l.Size != out.Size {
			return none, fmt.Errorf("remote cache get %s: %w: layer %d does not match output %s", key, ErrInvalid, i, out.Name)
		}
		if _, err := store.Stat(ctx, out.Digest); err == nil {
			continue
		}
		if err := c.fetchObject(ctx, store, l, out); err != nil {
			return none, fmt.Errorf("remote cache get %s: output %s (%s, layer %s): %w", key, out.Name, out.Digest, l.Digest, err)
		}
	}
	return rec, nil
}

// fetchObject streams one layer into the store, retrying transient failures and corrupt bytes.
func (c *Repo) fetchObject(ctx context.Context, store *artifacts.Store, l v1.Descriptor, out artifacts.NamedObject) error {
	var err error
	for attempt := 1; attempt <= c.r.Retries(); attempt++ {
		rc := c.r.OpenBlob(ctx, l, 0, l.Size)
		_, err = store.IngestExpect(ctx, oci.NewVerifyReader(rc, l.Size, l.Digest.String(), "object "+out.Digest.String()),
			artifacts.Object{Digest: out.Digest, Size: out.Size})
		rc.Close()
		if err == nil {
			return nil
		}
		if !(oci.Transient(err) || errors.Is(err, artifacts.ErrCorrupt)) || ctx.Err() != nil {
			return err
		}
		oci.Backoff(ctx, attempt)
	}
	return err
}
