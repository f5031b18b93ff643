// Command testregistry runs a real OCI registry — github.com/distribution/distribution/v3, the
// reference implementation behind Docker Hub's registry — with its filesystem storage driver, for
// orkpipe's tests and bench harness (package orkpipe/registry/regtest starts it).
//
// It is its own Go module so that distribution's dependency graph (its OpenTelemetry versions in
// particular) never enters orkpipe's: orkpipe links dagger.io/dagger, whose telemetry package
// does not compile against the go.opentelemetry.io/otel/log that distribution v3.1.2 requires.
//
// Usage:
//
//	testregistry -root DIR [-addr 127.0.0.1:0]
//
// It listens on addr, prints "listening on HOST:PORT" as its first line on stdout once it accepts
// connections, and serves until its stdin reaches EOF (the parent exited or closed it) or it gets
// SIGINT/SIGTERM. Blobs and manifests are kept under DIR.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem" // storage driver "filesystem"
	"github.com/sirupsen/logrus"
)

func main() {
	root := flag.String("root", "", "directory holding the registry's blobs and manifests (required)")
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	if err := run(*root, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "testregistry:", err)
		os.Exit(1)
	}
}

func run(root, addr string) error {
	if root == "" {
		return fmt.Errorf("-root is required")
	}
	if st, err := os.Stat(root); err != nil {
		return err
	} else if !st.IsDir() {
		return fmt.Errorf("-root %s is not a directory", root)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := &configuration.Configuration{}
	cfg.Storage = configuration.Storage{
		"filesystem":  configuration.Parameters{"rootdirectory": root},
		"delete":      configuration.Parameters{"enabled": true},
		"maintenance": configuration.Parameters{"uploadpurging": map[any]any{"enabled": false}},
	}
	cfg.HTTP.Headers = http.Header{"X-Content-Type-Options": []string{"nosniff"}}
	cfg.Log.Level = "error"
	cfg.Log.AccessLog.Disabled = true
	logrus.SetOutput(os.Stderr)
	logrus.SetLevel(logrus.ErrorLevel)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handlers.NewApp(ctx, cfg), ReadHeaderTimeout: time.Minute}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("listening on %s\n", ln.Addr())

	stdin := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stdin) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	case <-stdin:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return srv.Close()
	}
	return nil
}
