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
//	                  (application/vnd.dev.orkpipe.object.salted.v1 for a salted layer, below)
//
// A layer's digest is the object's sha256, which the local store remembers beside the object
// (artifacts.Store.Digests): publishing an object hashes it at most once per store, and an object
// the repository already holds is not read at all. Every fetched object is verified twice while it
// streams into the local store: sha256 against the layer digest, BLAKE3 and size against the record
// (artifacts.Store.IngestExpect); a corrupt or truncated download stores nothing.
//
// # Corrupt blobs in the registry
//
// A blob whose download fails its sha256 (or its length) on every attempt is taken to be corrupt
// in the registry, and the Repo remembers it for its lifetime. Uploading it again would not help:
// a registry keeps the bytes it holds under a digest (salted.go says why). So PutAction publishes
// an object whose blob this Repo found corrupt as a salted layer — media type
// MediaTypeSaltedObject, bytes "<object's sha256> <generation>\n" and then the object, the two
// fields also in annotations AnnotationSalt and AnnotationGeneration — whose digest is another,
// and the record's manifest then points to that layer: the node a corrupt blob made run once is
// served to the next machine from the remote cache. A salted layer found corrupt in turn is
// replaced by the next generation. GetAction reads either kind of layer (the salt line checked, the
// object after it stored and verified as any object is), and learns from a salted layer of
// generation n that every lower generation of that object is corrupt, so that a Repo that read it
// never publishes one of those again.
package cacherepo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
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
	// MediaTypeSaltedObject is a layer holding the line "<AnnotationSalt> <AnnotationGeneration>\n"
	// and then the object.
	MediaTypeSaltedObject = "application/vnd.dev.orkpipe.object.salted.v1"
	// AnnotationSalt is a salted layer's object's sha256 digest (the digest of its own blob, which
	// the registry served corrupt).
	AnnotationSalt = "dev.orkpipe.object.salt"
	// AnnotationGeneration is a salted layer's generation: 1, or one more than the salted layer
	// found corrupt before it.
	AnnotationGeneration = "dev.orkpipe.object.generation"
	maxRecordBytes       = 4 << 20
)

// ErrInvalid: a manifest or record in the repository does not describe the node asked for.
var ErrInvalid = errors.New("invalid remote cache entry")

// Repo is a registry repository used as a remote build cache.
type Repo struct {
	r *oci.Repo

	mu   sync.Mutex
	gens map[string]int // an object's sha256 -> the lowest generation of its layers not known corrupt
}

// CheckName returns nil when repo ("registry/name") is a repository name Open accepts: the reference
// it opens (repo:cache) parses. It contacts nothing: a command that does not open the remote cache
// still refuses a malformed name as Open would.
func CheckName(repo string) error {
	if _, err := name.ParseReference(repo + ":cache"); err != nil {
		return fmt.Errorf("reference %q: %w", repo+":cache", err)
	}
	return nil
}

// Open connects to repo ("registry/name") for reading and writing.
func Open(ctx context.Context, repo string, opts ...oci.Option) (*Repo, error) {
	r, err := oci.Open(ctx, repo+":cache", true, opts...)
	if err != nil {
		return nil, err
	}
	return &Repo{r: r, gens: map[string]int{}}, nil
}

func tag(key artifacts.Digest) string { return "action-" + key.Hex() }

// PutAction uploads rec's outputs from store and then rec itself, tagged by its key. An output the
// repository already holds is not sent (nor read); one it lacks is read through the store's
// verifying reader, and the registry checks its sha256. An output whose blob GetAction found
// corrupt in the registry is published as a salted layer (see the package doc).
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
		blob, layer, err := c.objectBlob(ctx, store, out, od.SHA256String())
		if err != nil {
			return fmt.Errorf("remote cache put %s: %w", rec.Key, err)
		}
		if _, err := c.r.Upload(ctx, blob); err != nil {
			return fmt.Errorf("remote cache put %s: output %s: %w", rec.Key, out.Name, err)
		}
		layers = append(layers, layer)
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

// Entry is a node's record as the repository holds it, with the layers its outputs are in
// (Lookup, which checked the layers against the record); Fetch downloads the outputs.
type Entry struct {
	Record artifacts.ActionRecord
	layers []v1.Descriptor // one per output, in record order, checked against the record
}

// GetAction fetches the record of key and makes sure every output is in store, downloading and
// verifying the missing ones (Lookup, then Fetch). A key the repository does not have is an error
// wrapping artifacts.ErrNotFound (a miss). A blob that arrives corrupt on every attempt is
// remembered as corrupt in the registry (PutAction salts it). The record is returned, not stored:
// the caller records it with store.PutAction once it accepts the hit.
func (c *Repo) GetAction(ctx context.Context, store *artifacts.Store, key artifacts.Digest) (artifacts.ActionRecord, error) {
	e, err := c.Lookup(ctx, key)
	if err != nil {
		return artifacts.ActionRecord{}, err
	}
	if err := c.Fetch(ctx, store, e); err != nil {
		return artifacts.ActionRecord{}, err
	}
	return e.Record, nil
}

// Lookup fetches key's manifest and record (one small blob) and checks that its layers match the
// record's outputs, without downloading any output. A key the repository does not have is an error
// wrapping artifacts.ErrNotFound (a miss).
func (c *Repo) Lookup(ctx context.Context, key artifacts.Digest) (Entry, error) {
	var none Entry
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
		prefix, object, gen, err := saltLine(l)
		if err != nil {
			return none, fmt.Errorf("remote cache get %s: output %s: %w", key, out.Name, err)
		}
		if l.Annotations[AnnotationObjectB3] != out.Digest.String() || l.Size != int64(len(prefix))+out.Size {
			return none, fmt.Errorf("remote cache get %s: %w: layer %d (%s, %d bytes, %s %q) does not match output %s (%s, %d bytes)",
				key, ErrInvalid, i, l.MediaType, l.Size, AnnotationObjectB3, l.Annotations[AnnotationObjectB3], out.Name, out.Digest, out.Size)
		}
		c.corruptBelow(object, gen) // a salted layer of generation gen replaced corrupt ones
	}
	return Entry{Record: rec, layers: m.Layers}, nil
}

// Fetch makes sure every output of e (from Lookup) is in store, downloading and verifying the
// missing ones. A blob that arrives corrupt on every attempt is remembered as corrupt in the
// registry (PutAction salts it).
func (c *Repo) Fetch(ctx context.Context, store *artifacts.Store, e Entry) error {
	key := e.Record.Key
	for i, out := range e.Record.Outputs {
		l := e.layers[i]
		prefix, object, gen, err := saltLine(l)
		if err != nil {
			return fmt.Errorf("remote cache get %s: output %s: %w", key, out.Name, err)
		}
		if _, err := store.Stat(ctx, out.Digest); err == nil {
			continue
		}
		if err := c.fetchObject(ctx, store, l, prefix, out); err != nil {
			if blobCorrupt(err) && ctx.Err() == nil {
				c.corruptBelow(object, gen+1)
			}
			return fmt.Errorf("remote cache get %s: output %s (%s, layer %s): %w", key, out.Name, out.Digest, l.Digest, err)
		}
	}
	return nil
}

// fetchObject streams one layer, whose bytes are prefix and then out, into the store, retrying
// transient failures and corrupt bytes.
func (c *Repo) fetchObject(ctx context.Context, store *artifacts.Store, l v1.Descriptor, prefix []byte, out artifacts.NamedObject) error {
	var err error
	for attempt := 1; attempt <= c.r.Retries(); attempt++ {
		rc := c.r.OpenBlob(ctx, l, 0, l.Size)
		err = ingestLayer(ctx, store, oci.NewVerifyReader(rc, l.Size, l.Digest.String(), "object "+out.Digest.String()), l, prefix, out)
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

// ingestLayer checks that r (the layer's bytes) begins with prefix and stores what follows as out.
func ingestLayer(ctx context.Context, store *artifacts.Store, r io.Reader, l v1.Descriptor, prefix []byte, out artifacts.NamedObject) error {
	if len(prefix) > 0 {
		got := make([]byte, len(prefix))
		if _, err := io.ReadFull(r, got); err != nil {
			return fmt.Errorf("salted layer %s: reading its salt line: %w", l.Digest, err)
		}
		if !bytes.Equal(got, prefix) {
			return fmt.Errorf("salted layer %s: %w: it begins with %q, want its salt line %q", l.Digest, oci.ErrDigestMismatch, got, prefix)
		}
	}
	_, err := store.IngestExpect(ctx, r, artifacts.Object{Digest: out.Digest, Size: out.Size})
	return err
}
