package registry

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// Defaults.
const (
	DefaultPartSize  = 512 << 20 // a file's data is pushed as layers of at most this many bytes
	MinPartSize      = 64 << 10
	DefaultChunkSize = 64 << 20 // PATCH size of a chunked upload
	DefaultRetries   = 5        // attempts per part (download or upload) before giving up
)

// UploadMode is the first blob-upload method tried; the other one is the fallback when the registry
// refuses the first (ErrRefused).
type UploadMode int

const (
	// UploadMonolithic: POST then one PUT carrying the whole blob.
	UploadMonolithic UploadMode = iota
	// UploadChunked: POST, PATCH in chunks with Content-Range, then PUT.
	UploadChunked
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
	partSize   int64
	jobs       int
	plainHTTP  map[string]bool
	insecure   bool
	keychain   authn.Keychain
	transport  http.RoundTripper
	progress   Progress
	signer     ed25519.PrivateKey
	trust      []ed25519.PublicKey
	annotator  Annotator
	model      ModelInfo
	created    time.Time
	logger     *slog.Logger
	retries    int
	force      bool
	uploadMode UploadMode
	chunkSize  int64
}

func makeOptions(opts []Option) (*options, error) {
	o := &options{
		partSize:  DefaultPartSize,
		jobs:      4,
		plainHTTP: map[string]bool{},
		keychain:  authn.DefaultKeychain,
		transport: http.DefaultTransport,
		progress:  nopProgress{},
		logger:    slog.Default(),
		retries:   DefaultRetries,
		chunkSize: DefaultChunkSize,
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// WithPartSize sets the largest layer: bigger files are pushed as several byte-range layers.
func WithPartSize(n int64) Option {
	return func(o *options) error {
		if n < MinPartSize {
			return fmt.Errorf("part size %d: must be at least %d bytes", n, MinPartSize)
		}
		o.partSize = n
		return nil
	}
}

// WithJobs sets how many layers transfer at once.
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
func WithPlainHTTP(host string) Option {
	return func(o *options) error {
		if host == "" {
			return fmt.Errorf("plain HTTP: empty host")
		}
		o.plainHTTP[host] = true
		return nil
	}
}

// WithInsecure allows plain HTTP to any host and skips TLS certificate verification.
func WithInsecure() Option {
	return func(o *options) error { o.insecure = true; return nil }
}

// WithKeychain sets where credentials come from (default authn.DefaultKeychain: Docker config and
// credential helpers).
func WithKeychain(k authn.Keychain) Option {
	return func(o *options) error {
		if k == nil {
			return fmt.Errorf("keychain: nil")
		}
		o.keychain = k
		return nil
	}
}

// WithTransport sets the base HTTP transport (default http.DefaultTransport).
func WithTransport(t http.RoundTripper) Option {
	return func(o *options) error {
		if t == nil {
			return fmt.Errorf("transport: nil")
		}
		o.transport = t
		return nil
	}
}

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
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("logger: nil")
		}
		o.logger = l
		return nil
	}
}

// WithRetries sets the attempts per part before a transfer fails.
func WithRetries(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("retries %d: must be at least 1", n)
		}
		o.retries = n
		return nil
	}
}

// WithForce lets Pull replace a destination file whose content differs from the artifact.
func WithForce() Option {
	return func(o *options) error { o.force = true; return nil }
}

// WithUploadMode sets the first upload method tried (the other is the fallback) and the chunk size
// of chunked uploads.
func WithUploadMode(m UploadMode, chunkSize int64) Option {
	return func(o *options) error {
		if m != UploadMonolithic && m != UploadChunked {
			return fmt.Errorf("upload mode %d: unknown", m)
		}
		if chunkSize < MinPartSize {
			return fmt.Errorf("chunk size %d: must be at least %d bytes", chunkSize, MinPartSize)
		}
		o.uploadMode, o.chunkSize = m, chunkSize
		return nil
	}
}
