// Package daggerexec is an engine.Executor that runs build nodes as containers on a Dagger engine
// (dagger.io/dagger v0.18.14), local or remote. orkpipe keeps planning, keys, the action cache,
// the memory budget and materializing; only execution moves.
//
// Per node the executor builds, from scratch (no base image, platform linux/amd64):
//
//	/orkpipe                 the static linux/amd64 orkpipe binary (CGO_ENABLED=0), mode 0555
//	/node/material.json      the node's canonical key material
//	/node/in/<64 hex>        every distinct input and tool file, named by its BLAKE3 digest
//
// and runs `/orkpipe node exec --key <node key> --material /node/material.json --inputs /node/in
// --output /node/out` — the code path the local executor runs in process (package nodeexec). The
// node key is on the exec line, so identical nodes also hit Dagger's own cache. /node/out is
// exported into a scratch directory of the local store, every output is re-hashed and compared
// with the result record, and only then adopted into the store (nodeexec.Ingest with Precheck).
// A failing exec reports the tail of the container's stderr.
//
// Connection uses the Go SDK's standard environment: _EXPERIMENTAL_DAGGER_CLI_BIN names the
// dagger CLI (v0.18.14) that opens the session, _EXPERIMENTAL_DAGGER_RUNNER_HOST the engine
// (tcp://, unix://, kube-pod://, docker-container://); inside `dagger run` the session variables
// are used instead. Without either, Connect fails at once with ErrNoEngine — it never downloads a
// CLI and never falls back to running locally — and a connection that does not come up within
// the timeout fails the same way.
package daggerexec
