package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ErrManifestUnknown: the registry has no manifest under the reference asked for.
var ErrManifestUnknown = errors.New("manifest unknown")

// GetManifest fetches the manifest at ref (the Repo's reference when ref is "", else a tag or
// "sha256:..." digest in the same repository) and checks that its bytes hash to the digest the
// registry names. A reference the registry does not know wraps ErrManifestUnknown.
func (r *Repo) GetManifest(ctx context.Context, ref string) ([]byte, v1.Hash, error) {
	nr := r.ref
	if ref != "" {
		if h, err := v1.NewHash(ref); err == nil {
			nr = r.repo.Digest(h.String())
		} else {
			nr = r.repo.Tag(ref)
		}
	}
	desc, err := remote.Get(nr, append(r.remote, remote.WithContext(ctx))...)
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
		return nil, v1.Hash{}, fmt.Errorf("get manifest %s: %w", nr, ErrManifestUnknown)
	}
	if err != nil {
		return nil, v1.Hash{}, fmt.Errorf("get manifest %s: %w", nr, err)
	}
	h, _, err := v1.SHA256(bytes.NewReader(desc.Manifest))
	if err != nil {
		return nil, v1.Hash{}, err
	}
	if h != desc.Digest {
		return nil, v1.Hash{}, fmt.Errorf("get manifest %s: %w: bytes hash to %s, registry says %s", nr, ErrDigestMismatch, h, desc.Digest)
	}
	return desc.Manifest, h, nil
}

// PutManifest puts an OCI image manifest (raw bytes we serialized) under tag, or under its own
// digest when tag is "", and returns its digest.
func (r *Repo) PutManifest(ctx context.Context, tag string, raw []byte) (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return v1.Hash{}, err
	}
	var nr name.Reference = r.repo.Digest(h.String())
	if tag != "" {
		nr = r.repo.Tag(tag)
	}
	if err := remote.Put(nr, rawManifest{raw, types.OCIManifestSchema1}, append(r.remote, remote.WithContext(ctx))...); err != nil {
		return v1.Hash{}, fmt.Errorf("put manifest %s to %s: %w", h, nr, err)
	}
	return h, nil
}

// Referrers lists the manifests whose subject is the manifest subject and whose artifactType is
// artifactType: the OCI 1.1 referrers API, or, for registries without it (distribution v3
// included), the referrers tag schema ("sha256-<hex>" index, maintained by go-containerregistry on
// push).
func (r *Repo) Referrers(ctx context.Context, subject v1.Hash, artifactType string) ([]v1.Descriptor, error) {
	idx, err := remote.Referrers(r.repo.Digest(subject.String()), append(r.remote, remote.WithContext(ctx), remote.WithFilter("artifactType", artifactType))...)
	if err != nil {
		return nil, fmt.Errorf("list referrers of %s: %w", subject, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("referrers of %s: %w", subject, err)
	}
	var out []v1.Descriptor
	for _, d := range im.Manifests {
		if d.ArtifactType == artifactType {
			out = append(out, d)
		}
	}
	return out, nil
}

// rawManifest is a remote.Taggable for bytes we serialized ourselves.
type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }
