// Package oci is the OCI distribution client orkpipe's registry packages share (registry: push,
// pull, describe, attestations; registry/cacherepo: the remote build cache). A Repo is one
// repository on one registry with an authenticated client: blob existence, uploads (monolithic, or
// chunked and resumable from the registry's own count of the bytes it holds), ranged downloads that
// resume a dropped response from the last byte received, manifests and referrers. It knows nothing
// of what the blobs hold.
//
// Credentials come from the Docker config and credential helpers (authn.DefaultKeychain); token
// and basic auth are go-containerregistry's transport. TLS is required unless WithPlainHTTP names
// the host or WithInsecure is given, also for loopback and private addresses; credentials never
// appear in errors or logs.
package oci

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Defaults.
const (
	DefaultChunkSize = 64 << 20 // PATCH size of a chunked upload
	MinChunkSize     = 64 << 10
	DefaultRetries   = 5 // attempts per transfer before giving up
	// DefaultIdleTimeout is how long a blob download may receive nothing before it is dropped and
	// resumed (a stalled connection otherwise holds a pull forever).
	DefaultIdleTimeout = time.Minute
)

// UploadMode is the blob-upload method tried first; the other one is the fallback when the
// registry refuses the first (ErrRefused).
type UploadMode int

const (
	// UploadAuto: chunked (resumable) for blobs larger than one chunk, monolithic otherwise.
	UploadAuto UploadMode = iota
	// UploadMonolithic: POST then one PUT carrying the whole blob.
	UploadMonolithic
	// UploadChunked: POST, PATCH in chunks with Content-Range, then PUT; an interrupted chunk
	// resumes from the registry's count of the bytes it received.
	UploadChunked
)

// Option configures a Repo. Options validate their arguments and return an error instead of
// silently clamping.
type Option func(*options) error

type options struct {
	plainHTTP  map[string]bool
	insecure   bool
	keychain   authn.Keychain
	transport  http.RoundTripper
	logger     *slog.Logger
	retries    int
	idle       time.Duration
	uploadMode UploadMode
	chunkSize  int64
	sessions   *sessionStore // nil: chunked upload sessions are not remembered across processes
}

func makeOptions(opts []Option) (*options, error) {
	o := &options{
		plainHTTP: map[string]bool{},
		keychain:  authn.DefaultKeychain,
		transport: http.DefaultTransport,
		logger:    slog.Default(),
		retries:   DefaultRetries,
		idle:      DefaultIdleTimeout,
		chunkSize: DefaultChunkSize,
	}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			return nil, err
		}
	}
	return o, nil
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

// WithRetries sets the attempts per transfer (and the resumptions of one download or upload)
// before it fails.
func WithRetries(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("retries %d: must be at least 1", n)
		}
		o.retries = n
		return nil
	}
}

// WithIdleTimeout sets how long a blob download may receive no byte (from the request on) before the
// request is dropped and the download resumed from its last byte, as a dropped connection is (up to
// the retries).
func WithIdleTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("idle timeout %v: must be positive", d)
		}
		o.idle = d
		return nil
	}
}

// WithUploadMode sets the upload method tried first (the other is the fallback) and the chunk
// size of chunked uploads.
func WithUploadMode(m UploadMode, chunkSize int64) Option {
	return func(o *options) error {
		if m != UploadAuto && m != UploadMonolithic && m != UploadChunked {
			return fmt.Errorf("upload mode %d: unknown", m)
		}
		if chunkSize < MinChunkSize {
			return fmt.Errorf("chunk size %d: must be at least %d bytes", chunkSize, MinChunkSize)
		}
		o.uploadMode, o.chunkSize = m, chunkSize
		return nil
	}
}

// WithUploadState makes chunked uploads remember their session in dir (one small file per blob
// and repository, written atomically after the upload starts and after every chunk the registry
// acknowledges; no credentials), so that an upload whose process died resumes in the next
// process from the registry's count of the bytes it holds. A session is forgotten when its blob
// is complete, when the registry no longer knows it or refuses it (the upload then starts afresh,
// logged at info level), and after 7 days; at most 256 are kept. dir is created (0700) when
// needed. A session is used by one Upload at a time, in any process (a .lock file beside it,
// flocked while the Upload runs): another Upload of the same blob to the same repository waits
// for it, then sends nothing when it committed the blob (sessionlock.go).
func WithUploadState(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return fmt.Errorf("upload state: empty directory name")
		}
		o.sessions = &sessionStore{dir: dir}
		return nil
	}
}

// Repo is one repository on one registry, with an authenticated client. It is safe for
// concurrent use.
type Repo struct {
	ref    name.Reference
	repo   name.Repository
	scheme string
	client *http.Client // authenticated; used for blobs
	remote []remote.Option
	o      *options
}

// tlsGuard refuses plain-HTTP requests to hosts that were not explicitly allowed, so that TLS is
// the default even for hosts go-containerregistry would treat as local (loopback, RFC 1918).
type tlsGuard struct {
	next    http.RoundTripper
	allowed map[string]bool
	any     bool
}

func (g tlsGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !g.any && !g.allowed[req.URL.Host] {
		return nil, fmt.Errorf("refusing plain HTTP to %s: use TLS, or allow this host with --plain-http", req.URL.Host)
	}
	return g.next.RoundTrip(req)
}

// Open parses ref (a tag or digest reference, or "registry/repo:tag" for a repository used by
// tag) and authenticates for pull, and for push when push is true.
func Open(ctx context.Context, ref string, push bool, opts ...Option) (*Repo, error) {
	o, err := makeOptions(opts)
	if err != nil {
		return nil, err
	}
	probe, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("reference %q: %w", ref, err)
	}
	host := probe.Context().RegistryStr()
	plain := o.insecure || o.plainHTTP[host]
	var nopts []name.Option
	if plain {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return nil, fmt.Errorf("reference %q: %w", ref, err)
	}
	base := o.transport
	if o.insecure {
		if ht, ok := base.(*http.Transport); ok {
			ht = ht.Clone()
			if ht.TLSClientConfig == nil {
				ht.TLSClientConfig = &tls.Config{}
			}
			ht.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // --insecure was asked for explicitly
			base = ht
		}
	}
	guard := tlsGuard{next: base, allowed: o.plainHTTP, any: o.insecure}
	repo := r.Context()
	auth, err := o.keychain.Resolve(repo)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", repo.RegistryStr(), err)
	}
	scopes := []string{repo.Scope(transport.PullScope)}
	if push {
		scopes = []string{repo.Scope(transport.PushScope)}
	}
	rt, err := transport.NewWithContext(ctx, repo.Registry, auth, guard, scopes)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", repo.RegistryStr(), err)
	}
	scheme := "https"
	if plain {
		scheme = repo.Scheme()
	}
	return &Repo{
		ref:    r,
		repo:   repo,
		scheme: scheme,
		client: &http.Client{Transport: rt},
		remote: []remote.Option{remote.WithContext(ctx), remote.WithTransport(rt), remote.WithUserAgent("orkpipe")},
		o:      o,
	}, nil
}

// Ref returns the reference the Repo was opened with.
func (r *Repo) Ref() name.Reference { return r.ref }

// Name returns the repository, "registry/name".
func (r *Repo) Name() string { return r.repo.String() }

// Logger returns the logger of the Repo's options.
func (r *Repo) Logger() *slog.Logger { return r.o.logger }

// Retries returns the attempts per transfer.
func (r *Repo) Retries() int { return r.o.retries }

// url returns the registry URL of an API path such as "/v2/REPO/blobs/DIGEST".
func (r *Repo) url(path string) *url.URL {
	return &url.URL{Scheme: r.scheme, Host: r.repo.RegistryStr(), Path: path}
}

func (r *Repo) blobURL(digest string) *url.URL {
	return r.url(fmt.Sprintf("/v2/%s/blobs/%s", r.repo.RepositoryStr(), digest))
}
