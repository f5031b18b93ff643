// Package regtest starts a real OCI registry (github.com/distribution/distribution/v3, the reference
// implementation behind Docker Hub's registry) in-process, for tests of orkpipe's registry package.
//
// It is not a fake: blobs and manifests go through distribution's HTTP handlers and its filesystem
// storage driver, rooted in a test temporary directory so that multi-GiB blobs do not live in memory.
package regtest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem" // storage driver "filesystem"
	"github.com/sirupsen/logrus"
)

// Registry is a running in-process registry.
type Registry struct {
	// Server is the HTTP test server; its URL is http://127.0.0.1:PORT.
	Server *httptest.Server
	// Host is "127.0.0.1:PORT", the registry part of a reference.
	Host string
	// RootDir is where the storage driver keeps blobs and manifests.
	RootDir string
}

// Start starts a registry whose handler is wrapped by wrap (nil: none), for example a fault-injecting
// proxy. It is shut down when the test ends.
func Start(t testing.TB, wrap func(http.Handler) http.Handler) *Registry {
	t.Helper()
	root := t.TempDir()
	cfg := &configuration.Configuration{}
	cfg.Storage = configuration.Storage{
		"filesystem": configuration.Parameters{"rootdirectory": root},
		"delete":     configuration.Parameters{"enabled": true},
		"maintenance": configuration.Parameters{
			"uploadpurging": map[any]any{"enabled": false},
		},
	}
	cfg.HTTP.Headers = http.Header{"X-Content-Type-Options": []string{"nosniff"}}
	cfg.Log.Level = "error"
	cfg.Log.AccessLog.Disabled = true
	logrus.SetOutput(io.Discard)

	ctx, cancel := context.WithCancel(context.Background())
	app := handlers.NewApp(ctx, cfg)
	var h http.Handler = app
	if wrap != nil {
		h = wrap(app)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		cancel()
	})
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatalf("regtest: parse server URL %q: %v", srv.URL, err)
	}
	return &Registry{Server: srv, Host: u.Host, RootDir: root}
}

// Ref returns "HOST/repo:tag" (or "HOST/repo@digest" when tagOrDigest contains ':').
func (r *Registry) Ref(repo, tagOrDigest string) string {
	for _, c := range tagOrDigest {
		if c == ':' {
			return r.Host + "/" + repo + "@" + tagOrDigest
		}
	}
	return r.Host + "/" + repo + ":" + tagOrDigest
}
