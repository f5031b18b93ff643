package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"orkpipe/artifacts"
)

// Remote build cache layout, in one repository:
//
//	tag "action-<hex node key>" -> OCI image manifest
//	    artifactType  application/vnd.dev.orkpipe.action.v1+json
//	    config        the artifacts.ActionRecord JSON (same media type)
//	    layers        one per output, in record order: application/vnd.dev.orkpipe.object.v1,
//	                  annotations org.opencontainers.image.title = output name,
//	                  dev.orkpipe.object.blake3 = the object's BLAKE3 digest
const (
	MediaTypeAction      = "application/vnd.dev.orkpipe.action.v1+json"
	MediaTypeObject      = "application/vnd.dev.orkpipe.object.v1"
	AnnotationObjectB3   = "dev.orkpipe.object.blake3"
	maxActionRecordBytes = 4 << 20
)

// RemoteCache stores node results (action records and their output objects) in a registry
// repository so that another machine, or a cleared cache, can reuse them. Every fetched object is
// verified twice while it streams into the local store: sha256 against the layer digest and BLAKE3
// and size against the record (artifacts.Store.IngestExpect).
type RemoteCache struct {
	t *target
}

// OpenRemoteCache connects to repo ("registry/name") for reading and writing.
func OpenRemoteCache(ctx context.Context, repo string, opts ...Option) (*RemoteCache, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, err
	}
	t, err := newTarget(ctx, repo+":cache", o, true)
	if err != nil {
		return nil, err
	}
	return &RemoteCache{t: t}, nil
}

func (c *RemoteCache) tag(key artifacts.Digest) string { return "action-" + key.Hex() }

// PutAction uploads rec's outputs from store (read through its verifying reader) and then rec
// itself, tagged by its key. Outputs already in the repository are not sent again.
func (c *RemoteCache) PutAction(ctx context.Context, store *artifacts.Store, rec artifacts.ActionRecord) error {
	recJSON, err := artifacts.EncodeActionRecord(rec)
	if err != nil {
		return fmt.Errorf("remote cache put %s: %w", rec.Key, err)
	}
	var layers []v1.Descriptor
	for _, out := range rec.Outputs {
		h := sha256.New()
		rc, err := store.Open(ctx, out.Digest)
		if err != nil {
			return fmt.Errorf("remote cache put %s: output %s (%s): %w", rec.Key, out.Name, out.Digest, err)
		}
		n, err := io.Copy(h, ctxReader{ctx, rc})
		rc.Close()
		if err != nil {
			return fmt.Errorf("remote cache put %s: output %s (%s): %w", rec.Key, out.Name, out.Digest, err)
		}
		if n != out.Size {
			return fmt.Errorf("remote cache put %s: output %s (%s) has %d bytes, record says %d", rec.Key, out.Name, out.Digest, n, out.Size)
		}
		d := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
		open := func() (io.ReadCloser, error) { return store.Open(ctx, out.Digest) }
		if _, err := c.t.uploadBlob(ctx, d.String(), n, open, func(int64) {}); err != nil {
			return fmt.Errorf("remote cache put %s: output %s: %w", rec.Key, out.Name, err)
		}
		layers = append(layers, v1.Descriptor{MediaType: MediaTypeObject, Size: n, Digest: d,
			Annotations: map[string]string{AnnotationTitle: out.Name, AnnotationObjectB3: out.Digest.String()}})
	}
	cfg, err := c.t.putSmallBlob(ctx, recJSON, MediaTypeAction)
	if err != nil {
		return fmt.Errorf("remote cache put %s: record: %w", rec.Key, err)
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: MediaTypeAction, Config: cfg, Layers: layers}
	if m.Layers == nil {
		m.Layers = []v1.Descriptor{}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := remote.Put(c.t.repo.Tag(c.tag(rec.Key)), rawManifest{raw, types.OCIManifestSchema1}, c.t.remote...); err != nil {
		return fmt.Errorf("remote cache put %s: manifest: %w", rec.Key, err)
	}
	return nil
}

// GetAction fetches the record of key and makes sure every output is in store, downloading and
// verifying the missing ones. A key the repository does not have is an error wrapping
// artifacts.ErrNotFound (a miss). The record is returned, not stored: the caller records it with
// store.PutAction once it accepts the hit.
func (c *RemoteCache) GetAction(ctx context.Context, store *artifacts.Store, key artifacts.Digest) (artifacts.ActionRecord, error) {
	var none artifacts.ActionRecord
	desc, err := remote.Get(c.t.repo.Tag(c.tag(key)), c.t.remote...)
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
		return none, fmt.Errorf("remote cache %s: %w", key, artifacts.ErrNotFound)
	}
	if err != nil {
		return none, fmt.Errorf("remote cache get %s: %w", key, err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return none, fmt.Errorf("remote cache get %s: manifest: %w", key, err)
	}
	if m.ArtifactType != MediaTypeAction || string(m.Config.MediaType) != MediaTypeAction || m.Config.Size > maxActionRecordBytes {
		return none, fmt.Errorf("remote cache get %s: %w: not an action manifest", key, ErrInvalidManifest)
	}
	rc, err := c.t.openBlob(ctx, m.Config.Digest.String(), 0)
	if err != nil {
		return none, fmt.Errorf("remote cache get %s: record: %w", key, err)
	}
	b, err := io.ReadAll(newVerifyingReader(io.LimitReader(rc, m.Config.Size+1), m.Config.Size, m.Config.Digest.String(), "action record"))
	rc.Close()
	if err != nil {
		return none, fmt.Errorf("remote cache get %s: %w", key, err)
	}
	rec, err := artifacts.DecodeActionRecord(b)
	if err != nil {
		return none, fmt.Errorf("remote cache get %s: record: %w", key, err)
	}
	if rec.Key != key {
		return none, fmt.Errorf("remote cache get %s: %w: record is for key %s", key, ErrInvalidManifest, rec.Key)
	}
	if len(m.Layers) != len(rec.Outputs) {
		return none, fmt.Errorf("remote cache get %s: %w: %d layers for %d outputs", key, ErrInvalidManifest, len(m.Layers), len(rec.Outputs))
	}
	for i, out := range rec.Outputs {
		l := m.Layers[i]
		if l.Annotations[AnnotationObjectB3] != out.Digest.String() || l.Size != out.Size {
			return none, fmt.Errorf("remote cache get %s: %w: layer %d does not match output %s", key, ErrInvalidManifest, i, out.Name)
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

// fetchObject streams one layer into the store, retrying transient failures.
func (c *RemoteCache) fetchObject(ctx context.Context, store *artifacts.Store, l v1.Descriptor, out artifacts.NamedObject) error {
	var err error
	for attempt := 1; attempt <= c.t.o.retries; attempt++ {
		rr := &resumingReader{ctx: ctx, t: c.t, digest: l.Digest.String(), size: l.Size, max: c.t.o.retries}
		_, err = store.IngestExpect(ctx, newVerifyingReader(rr, l.Size, l.Digest.String(), "object "+out.Digest.String()),
			artifacts.Object{Digest: out.Digest, Size: out.Size})
		rr.Close()
		if err == nil {
			return nil
		}
		if !(transient(err) || errors.Is(err, artifacts.ErrCorrupt)) || ctx.Err() != nil {
			return err
		}
		backoff(ctx, attempt)
	}
	return err
}
