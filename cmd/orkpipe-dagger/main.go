// Command orkpipe-dagger is orkpipe's Dagger executor in a process of its own. `orkpipe build
// --executor dagger` (and `orkpipe demo --executor dagger`) starts it on the first node that must
// run, sends it the nodes over stdin (package procexec) and ends it when the build ends; it runs
// each node as a container on the Dagger engine the SDK's environment names (package daggerexec)
// and stores the outputs in the cache it is given. It links the Dagger SDK so that orkpipe does
// not: install it beside orkpipe (docs/dagger.md):
//
//	go install ./cmd/orkpipe ./cmd/orkpipe-dagger
//
// It is not meant to be run by hand:
//
//	orkpipe-dagger --store DIR --binary PATH [--log-level warn|info|debug]
//
// Its log goes to stderr; stdout is the protocol's. When the executor cannot start (no engine, a
// bad binary) it sends the error instead of its hello and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"orkpipe/artifacts"
	"orkpipe/internal/buildinfo"
	"orkpipe/pipelines/daggerexec"
	"orkpipe/pipelines/procexec"
)

func main() {
	os.Exit(run())
}

func run() int {
	storeDir := flag.String("store", "", "the orkpipe cache (store) the nodes' inputs are in and their outputs go to")
	binary := flag.String("binary", "", "the static linux/amd64 orkpipe binary the containers run")
	level := flag.String("log-level", "warn", "log level: warn, info or debug")
	flag.Parse()
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil || flag.NArg() != 0 || *storeDir == "" || *binary == "" {
		fmt.Fprintln(os.Stderr, "usage: orkpipe-dagger --store DIR --binary PATH [--log-level warn|info|debug] (started by orkpipe --executor dagger)")
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	// The parent ends the session by closing stdin; Ctrl-C, which the terminal sends to the whole
	// process group, must not cut the session short before the parent has told the nodes to stop.
	signal.Ignore(os.Interrupt)
	ctx := context.Background()
	store, err := artifacts.OpenStore(*storeDir)
	if err != nil {
		procexec.Refuse(os.Stdout, fmt.Errorf("opening the cache %s: %w", *storeDir, err))
		return 1
	}
	defer store.Close()
	x, err := daggerexec.New(ctx, store, daggerexec.WithBinary(*binary), daggerexec.WithLogger(logger))
	if err != nil {
		procexec.Refuse(os.Stdout, err)
		return 1
	}
	hello := procexec.Hello{Program: "orkpipe-dagger"}
	if info, err := buildinfo.Get(); err == nil {
		hello.Orkpipe = artifacts.OrkpipeBuild{Version: info.Version, Revision: info.Revision, Dirty: info.Dirty, Binary: info.Digest}
	}
	serr := procexec.Serve(ctx, os.Stdin, os.Stdout, hello, x)
	cerr := x.Close()
	for _, err := range []error{serr, cerr} {
		if err != nil {
			logger.Error("orkpipe-dagger", "err", err)
			return 1
		}
	}
	return 0
}
