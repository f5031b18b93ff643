package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem" // storage driver "filesystem"
	"github.com/sirupsen/logrus"
)

// localRegistry is a real OCI registry (distribution v3, the reference implementation, with its
// filesystem driver rooted in root) served by this process on 127.0.0.1 — what registry/regtest
// runs for the tests, started without a testing.TB.
type localRegistry struct {
	Host   string
	srv    *http.Server
	cancel context.CancelFunc
}

func startRegistry(ctx context.Context, root string) (*localRegistry, error) {
	cfg := &configuration.Configuration{}
	cfg.Storage = configuration.Storage{
		"filesystem":  configuration.Parameters{"rootdirectory": root},
		"delete":      configuration.Parameters{"enabled": true},
		"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
	}
	cfg.Log.Level = "error"
	cfg.Log.AccessLog.Disabled = true
	logrus.SetOutput(io.Discard)
	ctx, cancel := context.WithCancel(ctx)
	app := handlers.NewApp(ctx, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		return nil, fmt.Errorf("local registry: %w", err)
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 30 * time.Second}
	go srv.Serve(ln)
	return &localRegistry{Host: ln.Addr().String(), srv: srv, cancel: cancel}, nil
}

func (r *localRegistry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.srv.Shutdown(ctx)
	r.cancel()
	return err
}
