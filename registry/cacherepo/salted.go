package cacherepo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"orkpipe/artifacts"
	"orkpipe/registry/oci"
)

// A salted layer holds an object whose own blob (its sha256) the registry serves corrupt. A
// registry cannot be made to replace a blob's bytes: the distribution registry accepts a new
// upload of a digest it holds (201) and keeps the bytes it has (its storage is content-addressed:
// "the content has already been uploaded"); deleting the blob only unlinks it from the repository,
// so an upload after the delete links the same corrupt bytes again, in every repository of that
// registry, until its garbage collection (TestRegistryKeepsCorruptBlob). A salted layer's bytes
// are therefore other bytes, a salt line and then the object:
//
//	"<sha256 digest of the object> <generation>\n" <object>
//
// with the digest in annotation AnnotationSalt and the generation, 1 or more, in
// AnnotationGeneration. Generation n is published when generation n-1 (0: the object's own blob)
// was found corrupt, so a layer of generation n also says that every lower one is corrupt.

// maxGeneration bounds a salted layer's generation (each one is a corrupt blob found).
const maxGeneration = 1 << 20

// saltLine returns the bytes a layer holds before its object, the object's sha256 digest and the
// layer's generation: no bytes, the layer's digest and 0 for MediaTypeObject. Any other media type,
// or annotations that do not name a sha256 digest and a generation in 1..maxGeneration, is
// ErrInvalid.
func saltLine(l v1.Descriptor) (line []byte, object string, gen int, err error) {
	switch string(l.MediaType) {
	case MediaTypeObject:
		return nil, l.Digest.String(), 0, nil
	case MediaTypeSaltedObject:
		salt, g := l.Annotations[AnnotationSalt], l.Annotations[AnnotationGeneration]
		if h, err := v1.NewHash(salt); err != nil || h.Algorithm != "sha256" {
			return nil, "", 0, fmt.Errorf("%w: layer %s: annotation %s is %q, want a sha256 digest", ErrInvalid, l.Digest, AnnotationSalt, salt)
		}
		n, err := strconv.Atoi(g)
		if err != nil || n < 1 || n > maxGeneration || strconv.Itoa(n) != g {
			return nil, "", 0, fmt.Errorf("%w: layer %s: annotation %s is %q, want an integer in 1..%d", ErrInvalid, l.Digest, AnnotationGeneration, g, maxGeneration)
		}
		return saltBytes(salt, n), salt, n, nil
	}
	return nil, "", 0, fmt.Errorf("%w: layer %s has media type %q, want %s or %s", ErrInvalid, l.Digest, l.MediaType, MediaTypeObject, MediaTypeSaltedObject)
}

func saltBytes(object string, gen int) []byte { return fmt.Appendf(nil, "%s %d\n", object, gen) }

// corruptBelow remembers that the layers of the object whose sha256 is object are corrupt in the
// registry below generation gen.
func (c *Repo) corruptBelow(object string, gen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gens[object] = max(c.gens[object], gen)
}

// generation is the lowest generation of the object's layers not known to be corrupt.
func (c *Repo) generation(object string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gens[object]
}

// blobCorrupt reports whether a download's failure says the registry's blob itself is wrong (its
// bytes do not hash to its digest, or it has another length), as opposed to the network's or the
// store's failure.
func blobCorrupt(err error) bool {
	return errors.Is(err, oci.ErrDigestMismatch) || errors.Is(err, oci.ErrBlobSize)
}

// objectBlob returns the blob that publishes out (whose sha256 is object) and its layer: the
// object's own blob, or, when this Repo knows that blob corrupt in the registry, the salted layer
// of the lowest generation it does not know corrupt (hashing the object once to name it).
func (c *Repo) objectBlob(ctx context.Context, store *artifacts.Store, out artifacts.NamedObject, object string) (oci.Blob, v1.Descriptor, error) {
	ann := map[string]string{AnnotationTitle: out.Name, AnnotationObjectB3: out.Digest.String()}
	gen := c.generation(object)
	if gen == 0 {
		h, err := v1.NewHash(object)
		if err != nil {
			return oci.Blob{}, v1.Descriptor{}, fmt.Errorf("output %s (%s): sha256 %q: %w", out.Name, out.Digest, object, err)
		}
		open := func(off int64) (io.ReadCloser, error) { return openAt(ctx, store, out.Digest, off) }
		return oci.Blob{Digest: object, Size: out.Size, Open: open}, v1.Descriptor{MediaType: MediaTypeObject, Size: out.Size, Digest: h, Annotations: ann}, nil
	}
	salt := saltBytes(object, gen)
	h, err := saltedDigest(ctx, store, out, salt)
	if err != nil {
		return oci.Blob{}, v1.Descriptor{}, err
	}
	n := int64(len(salt))
	open := func(off int64) (io.ReadCloser, error) {
		if off >= n {
			return openAt(ctx, store, out.Digest, off-n)
		}
		rc, err := openAt(ctx, store, out.Digest, 0)
		if err != nil {
			return nil, err
		}
		return readCloser{io.MultiReader(bytes.NewReader(salt[off:]), rc), rc}, nil
	}
	ann[AnnotationSalt], ann[AnnotationGeneration] = object, strconv.Itoa(gen)
	return oci.Blob{Digest: h.String(), Size: n + out.Size, Open: open},
		v1.Descriptor{MediaType: MediaTypeSaltedObject, Size: n + out.Size, Digest: h, Annotations: ann}, nil
}

// saltedDigest is the sha256 of salt followed by out, read through the store's verifying reader.
func saltedDigest(ctx context.Context, store *artifacts.Store, out artifacts.NamedObject, salt []byte) (v1.Hash, error) {
	rc, err := store.Open(ctx, out.Digest)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("output %s (%s): %w", out.Name, out.Digest, err)
	}
	defer rc.Close()
	h := sha256.New()
	h.Write(salt)
	n, err := io.Copy(h, oci.CtxReader{Ctx: ctx, R: rc})
	if err != nil {
		return v1.Hash{}, fmt.Errorf("output %s (%s): hashing its salted layer: %w", out.Name, out.Digest, err)
	}
	if n != out.Size {
		return v1.Hash{}, fmt.Errorf("output %s (%s): %d bytes, the record says %d", out.Name, out.Digest, n, out.Size)
	}
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}
