package registry

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"orkpipe/artifacts"
	"orkpipe/registry/oci"
)

// Defaults.
const (
	// DefaultRangeSize is the bytes per verification range: a file is fetched in parallel ranges of
	// this size, each checked against its own BLAKE3 value, and a killed pull loses at most the
	// ranges in flight.
	DefaultRangeSize = 64 << 20
	// MinRangeSize is the smallest range: one BLAKE3 piece (ranges are powers of two of pieces).
	MinRangeSize = artifacts.PieceSize
)

// Annotator returns extra layer annotations for one file about to be pushed (for example the pack
// format version read through ork/pack). Keys must start with "dev.orkpipe.". It is the seam through
// which format-aware metadata is added; the registry itself treats files as bytes.
type Annotator interface {
	FileAnnotations(ctx context.Context, path string) (map[string]string, error)
}

// AnnotatorFunc adapts a function to Annotator.
type AnnotatorFunc func(ctx context.Context, path string) (map[string]string, error)

// FileAnnotations calls f.
func (f AnnotatorFunc) FileAnnotations(ctx context.Context, path string) (map[string]string, error) {
	return f(ctx, path)
}

// Option configures Push, Pull, Describe and the attestation functions. Options validate their
// arguments and return an error instead of silently clamping.
type Option func(*options) error

type options struct {
	conn      []oci.Option // how to reach the registry (registry/oci): transport, logger, retries
	rangeSize int64
	jobs      int
	progress  Progress
	signer    ed25519.PrivateKey
	trust     []ed25519.PublicKey
	annotator Annotator
	digests   DigestSource
	model     ModelInfo
	created   time.Time
	force     bool
	only      []string    // Pull: the files to fetch (nil: all)
	compress  Compression // Push: whether a layer may be tar+zstd
	// Pull: the bytes available on the filesystem of a directory (freeBytes; a test fakes a full
	// disk with it), and whether the check is off (WithoutSpaceCheck).
	freeSpace    func(dir string) (int64, error)
	noSpaceCheck bool
	// Describe: the predicate types whose attestations are fetched first (WithPreferredPredicates).
	preferred []string
}

func makeOptions(opts []Option) (*options, error) {
	o := &options{
		rangeSize: DefaultRangeSize,
		compress:  CompressAuto,
		jobs:      4,
		progress:  nopProgress{},
		digests:   hashFiles{},
		freeSpace: freeBytes,
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// conn adds a connection option (see registry/oci).
func conn(opt oci.Option) Option {
	return func(o *options) error { o.conn = append(o.conn, opt); return nil }
}

// WithRangeSize sets the bytes per verification range of the files Push lays out (see
// DefaultRangeSize): a power of two of at least MinRangeSize.
func WithRangeSize(n int64) Option {
	return func(o *options) error {
		if !ValidRangeSize(n) {
			return fmt.Errorf("range size %d: must be a power of two of at least %d bytes", n, MinRangeSize)
		}
		o.rangeSize = n
		return nil
	}
}

// Compression says whether Push may compress a file's layer.
type Compression string

const (
	// CompressAuto compresses a file (a tar+zstd layer) when a sample of its data compresses below
	// 90% and that saves at least 1 MiB: the default.
	CompressAuto Compression = "auto"
	// CompressNever lays every file out raw, or as a plain tar where a sparse file's holes are left
	// out: the two forms every ModelPack client reads (modctl extracts no tar+zstd layer).
	CompressNever Compression = "never"
)

// ParseCompression returns the Compression named s ("auto" or "never").
func ParseCompression(s string) (Compression, error) {
	switch c := Compression(s); c {
	case CompressAuto, CompressNever:
		return c, nil
	}
	return "", fmt.Errorf("compression %q: want %q or %q", s, CompressAuto, CompressNever)
}

// WithCompression sets whether Push may compress layers (default CompressAuto).
func WithCompression(c Compression) Option {
	return func(o *options) error {
		if _, err := ParseCompression(string(c)); err != nil {
			return err
		}
		o.compress = c
		return nil
	}
}

// WithDigests makes Push take each file's digests from src (an artifacts.Store: remembered beside
// the stored object) instead of hashing the file.
func WithDigests(src DigestSource) Option {
	return func(o *options) error {
		if src == nil {
			return fmt.Errorf("digests: nil")
		}
		o.digests = src
		return nil
	}
}

// WithJobs sets how many files and ranges transfer at once.
func WithJobs(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("jobs %d: must be at least 1", n)
		}
		o.jobs = n
		return nil
	}
}

// WithPlainHTTP allows plain HTTP (no TLS) to exactly this registry host ("host:port").
func WithPlainHTTP(host string) Option { return conn(oci.WithPlainHTTP(host)) }

// WithInsecure allows plain HTTP to any host and skips TLS certificate verification.
func WithInsecure() Option { return conn(oci.WithInsecure()) }

// WithKeychain sets where credentials come from (default authn.DefaultKeychain: Docker config and
// credential helpers).
func WithKeychain(k authn.Keychain) Option { return conn(oci.WithKeychain(k)) }

// WithTransport sets the base HTTP transport (default http.DefaultTransport).
func WithTransport(t http.RoundTripper) Option { return conn(oci.WithTransport(t)) }

// WithProgress reports transfer progress to p.
func WithProgress(p Progress) Option {
	return func(o *options) error {
		if p == nil {
			return fmt.Errorf("progress: nil")
		}
		o.progress = p
		return nil
	}
}

// WithSigner makes Push attach the build provenance as an attestation signed with key.
func WithSigner(key ed25519.PrivateKey) Option {
	return func(o *options) error {
		if len(key) != ed25519.PrivateKeySize {
			return fmt.Errorf("signer: %w: ed25519 private key must be %d bytes, got %d", ErrInvalidKey, ed25519.PrivateKeySize, len(key))
		}
		o.signer = key
		return nil
	}
}

// WithTrust makes Pull refuse an artifact that has no provenance attestation validly signed by one of keys.
func WithTrust(keys ...ed25519.PublicKey) Option {
	return func(o *options) error {
		if len(keys) == 0 {
			return fmt.Errorf("trust: no keys")
		}
		for _, k := range keys {
			if len(k) != ed25519.PublicKeySize {
				return fmt.Errorf("trust: %w: ed25519 public key must be %d bytes, got %d", ErrInvalidKey, ed25519.PublicKeySize, len(k))
			}
		}
		o.trust = append(o.trust, keys...)
		return nil
	}
}

// WithAnnotator adds per-file layer annotations (see Annotator).
func WithAnnotator(a Annotator) Option {
	return func(o *options) error {
		if a == nil {
			return fmt.Errorf("annotator: nil")
		}
		o.annotator = a
		return nil
	}
}

// WithModelInfo sets the ModelPack descriptor and config fields and the board/recipe annotations.
// Fields left empty are taken from provenance.json when Push finds one.
func WithModelInfo(m ModelInfo) Option {
	return func(o *options) error { o.model = m; return nil }
}

// WithCreated sets the build time recorded in the manifest and config. Without it, Push takes it
// from provenance.json; a wall-clock default would make manifests non-deterministic, so there is none.
func WithCreated(t time.Time) Option {
	return func(o *options) error {
		if t.IsZero() {
			return fmt.Errorf("created: zero time")
		}
		o.created = t.UTC()
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return conn(oci.WithLogger(l)) }

// WithRetries sets the attempts per transfer (a file's upload, a range's download) before it fails.
func WithRetries(n int) Option { return conn(oci.WithRetries(n)) }

// WithFiles makes Pull fetch only the named files of the artifact (verified like any other); a name
// the artifact does not have is an error wrapping ErrNoFile, before anything is downloaded.
func WithFiles(names ...string) Option {
	return func(o *options) error {
		if len(names) == 0 {
			return fmt.Errorf("files: no names")
		}
		for _, n := range names {
			if err := validName(n); err != nil {
				return fmt.Errorf("files: %w", err)
			}
		}
		o.only = append(o.only, names...)
		return nil
	}
}

// WithForce lets Pull replace a destination file whose content differs from the artifact.
func WithForce() Option {
	return func(o *options) error { o.force = true; return nil }
}

// WithoutSpaceCheck makes Pull start even when the files it still has to write need more bytes
// than the destination's filesystem has free (ErrNoSpace otherwise): for a filesystem whose free
// space says less than what it can take (one that compresses or deduplicates).
func WithoutSpaceCheck() Option {
	return func(o *options) error { o.noSpaceCheck = true; return nil }
}

// WithPreferredPredicates makes Describe fetch the attestations of the given predicate types first, in
// the order given, then SLSA provenance (when not named), then the others in the referrers index's
// order, within the same bounds (at most 64 attestations and 64 MiB of envelopes): a caller that looks
// for board verifications names their predicate type, so that other attestations listed before them
// cannot push them past the bounds. The order is taken from the predicate type the index descriptor is
// annotated with (AnnotationPredicate); Description.Attestations stays in the index's order. Pull
// fetches SLSA provenance first, before these.
func WithPreferredPredicates(types ...string) Option {
	return func(o *options) error {
		if len(types) == 0 {
			return fmt.Errorf("preferred predicates: no predicate types")
		}
		for _, t := range types {
			if t == "" {
				return fmt.Errorf("preferred predicates: an empty predicate type in %q", types)
			}
		}
		o.preferred = append(o.preferred, types...)
		return nil
	}
}

// WithUploadMode sets the first upload method tried (the other is the fallback) and the chunk size
// of chunked uploads.
func WithUploadMode(m oci.UploadMode, chunkSize int64) Option {
	return conn(oci.WithUploadMode(m, chunkSize))
}

// WithUploadState makes Push remember its chunked uploads' sessions in dir (see
// oci.WithUploadState), so that a push whose process died resumes each large blob from what the
// registry holds instead of from byte 0; two pushes of the same blob to the same repository at once
// take turns (the second waits, then finds the blob). orkpipe push uses the cache's uploads/
// directory.
func WithUploadState(dir string) Option {
	return conn(oci.WithUploadState(dir))
}
