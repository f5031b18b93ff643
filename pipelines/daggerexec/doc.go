// Package daggerexec is an engine.Executor that runs build nodes as containers on a Dagger engine
// (dagger.io/dagger v0.18.14, connected with dagger.Connect), local or remote. orkpipe keeps
// planning, keys, the action cache, the memory budget and materializing; only execution moves.
//
// Per node the executor builds a container from scratch (no base image, platform linux/amd64):
//
//	/node/material.json        the node's canonical key material (a file of the root filesystem)
//	/node/bin/orkpipe          the static linux/amd64 orkpipe binary, mode 0555 (a mounted directory)
//	/node/in/<hex>/<hex>       every distinct input and tool file, named by its BLAKE3 digest, each
//	                           in a mounted directory of its own (nodeexec's per-input directory form)
//	/node/in/<hex>/<hex>.tar   instead, for a file with holes (a stub GGUF), its tar form (package
//	                           artifacts/sparse: only its data; see tarform.go for which files)
//
// and runs `/node/bin/orkpipe node exec --key <node key> --material /node/material.json --inputs
// /node/in --scratch /node/scratch --output /node/out` — the code path the local executor runs in
// process (package nodeexec), which unpacks a tar form under /node/scratch with its holes, checks
// that it hashes to its digest before the stage reads it, and removes it when the node ends. /node/out is exported into a scratch directory of the local store, every output is
// re-hashed and compared with the result record, and only then adopted into the store
// (nodeexec.Ingest with Precheck). A failing exec reports the tail of the container's stderr.
//
// Uploads are content-addressed, so that the engine's cache answers a node for any store holding
// the same inputs: every file the engine receives is a store object (a source, tool or binary
// the store lacks is ingested first) or the tar form of one (named <hex>.tar, a function of the
// object's bytes), uploaded with host.file, which the engine names by the
// file's content and file name — a store object's file name is its digest — and placed in a
// scratch directory of its own (Directory.withFile), which the container mounts (a mount adds no
// layer to the root filesystem, so a node with many inputs, write-orkpack, pays none per input). The container's
// definition then depends only on the bytes of its inputs, the binary and the key material, not
// on where they lie on this machine (a file copied into the container straight from the host
// would carry its host path into the engine's cache key). A node answered from the engine's
// cache brings back the result record of the run that produced it, which started before this
// executor sent the node: Stats counts such nodes.
//
// Connection uses the Go SDK's standard environment: _EXPERIMENTAL_DAGGER_CLI_BIN names the
// dagger CLI (v0.18.14) that opens the session, _EXPERIMENTAL_DAGGER_RUNNER_HOST the engine
// (tcp://, unix://, kube-pod://, docker-container://); inside `dagger run` the session variables
// are used instead. The CLI's `dagger session` process is started by this package (as the SDK
// starts it) and handed to dagger.Connect, so that a CLI that fails is reported with its whole
// stderr. Without either, New fails at once with ErrNoEngine — it never lets the SDK
// download a CLI and never falls back to running locally — and a connection that does not come
// up within the timeout fails the same way.
package daggerexec
