package registry

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// target is one repository on one registry, with an authenticated client.
type target struct {
	ref    name.Reference
	repo   name.Repository
	scheme string
	client *http.Client // authenticated; used for blobs
	remote []remote.Option
	o      *options
}

// tlsGuard refuses plain-HTTP requests to hosts that were not explicitly allowed, so that TLS is the
// default even for hosts go-containerregistry would treat as local (loopback, RFC 1918).
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

// newTarget parses ref and authenticates for pull (and push when push is true). Credentials come
// from the keychain and never appear in errors or logs.
func newTarget(ctx context.Context, ref string, o *options, push bool) (*target, error) {
	var nopts []name.Option
	probe, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("reference %q: %w", ref, err)
	}
	host := probe.Context().RegistryStr()
	plain := o.insecure || o.plainHTTP[host]
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
	return &target{
		ref:    r,
		repo:   repo,
		scheme: scheme,
		client: &http.Client{Transport: rt},
		remote: []remote.Option{remote.WithContext(ctx), remote.WithTransport(rt), remote.WithUserAgent("orkpipe")},
		o:      o,
	}, nil
}

// url returns the registry URL of an API path such as "/v2/REPO/blobs/DIGEST".
func (t *target) url(path string) *url.URL {
	return &url.URL{Scheme: t.scheme, Host: t.repo.RegistryStr(), Path: path}
}

func (t *target) blobURL(digest string) *url.URL {
	return t.url(fmt.Sprintf("/v2/%s/blobs/%s", t.repo.RepositoryStr(), digest))
}
