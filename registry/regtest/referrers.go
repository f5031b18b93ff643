package regtest

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// MoveReferrerLast rewrites the referrers index of manifest subject ("sha256:<hex>") in repo, the
// tag-schema index "sha256-<hex>" go-containerregistry maintains (sorted by digest), with the
// descriptor of referrer moved last: the order of a registry that lists referrers as they were
// pushed. It returns how many distinct referrers the index lists before it.
func (r *Registry) MoveReferrerLast(t testing.TB, repo, subject, referrer string) int {
	t.Helper()
	h, err := v1.NewHash(subject)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(r.Ref(repo, h.Algorithm+"-"+h.Hex), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(tag)
	if err != nil {
		t.Fatalf("referrers index of %s: %v", subject, err)
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		t.Fatalf("referrers index of %s: %v", subject, err)
	}
	var moved []v1.Descriptor
	idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d v1.Descriptor) bool {
		if d.Digest.String() == referrer {
			moved = append(moved, d)
			return true
		}
		return false
	})
	if len(moved) != 1 {
		t.Fatalf("referrers index of %s lists %s %d times, want once", subject, referrer, len(moved))
	}
	before := map[v1.Hash]bool{}
	for _, d := range idx.Manifests {
		before[d.Digest] = true
	}
	idx.Manifests = append(idx.Manifests, moved...)
	raw, err := json.Marshal(idx)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(tag, rawManifest{raw, desc.MediaType}); err != nil {
		t.Fatalf("rewriting the referrers index of %s: %v", subject, err)
	}
	return len(before)
}

// rawManifest is a remote.Taggable of bytes already serialized.
type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }
