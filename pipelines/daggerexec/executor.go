package daggerexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"dagger.io/dagger"
	"golang.org/x/sync/errgroup"

	"orkpipe/artifacts"
	"orkpipe/pipelines/daggerenv"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/nodeexec"
	"orkpipe/stages"
)

// Store is what the executor needs of the local store: a scratch directory on its filesystem to
// export into, adoption of verified files, and the objects it uploads (a file that is not yet an
// object is ingested first, see upload). *artifacts.Store implements it.
type Store interface {
	TempDir(ctx context.Context) (string, error)
	Path(ctx context.Context, d artifacts.Digest) (string, error)
	IngestFile(ctx context.Context, path string) (artifacts.Object, error)
	nodeexec.Adopter
}

// Option configures New. Options validate themselves.
type Option func(*config) error

type config struct {
	connectConfig
	binary       string
	beforeIngest func(outDir string) error
	wholeInputs  bool // no tar forms: every input sent as it is (tests measure the difference)
}

// WithBinary sets the orkpipe binary run in the containers (default: the running executable,
// which must then be a static linux/amd64 build). It must be a static linux/amd64 executable.
func WithBinary(path string) Option {
	return func(c *config) error {
		if err := CheckBinary(path); err != nil {
			return err
		}
		c.binary = path
		return nil
	}
}

// WithRunnerHost sets the engine (as _EXPERIMENTAL_DAGGER_RUNNER_HOST would) for this executor's
// session: tcp://HOST:PORT, unix:///PATH, kube-pod://POD?namespace=NS, docker-container://NAME.
func WithRunnerHost(host string) Option {
	return func(c *config) error {
		if host == "" {
			return fmt.Errorf("daggerexec: WithRunnerHost: empty host")
		}
		c.runnerHost = host
		return nil
	}
}

// WithConnectTimeout bounds how long New waits for the session and the engine's first answer
// (default 2 minutes: a locally provisioned engine may first pull its image).
func WithConnectTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("daggerexec: WithConnectTimeout: %s, want > 0", d)
		}
		c.timeout = d
		return nil
	}
}

// WithLogOutput receives the dagger CLI's progress output (default: discarded).
func WithLogOutput(w io.Writer) Option {
	return func(c *config) error { c.logOutput = w; return nil }
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("daggerexec: WithLogger: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithBeforeIngest calls f with every exported output directory before it is checked and
// ingested: fault injection for the executor conformance suite.
func WithBeforeIngest(f func(outDir string) error) Option {
	return func(c *config) error { c.beforeIngest = f; return nil }
}

// Executor runs nodes as containers on a Dagger engine. It is safe for concurrent use; the
// engine's -j bounds how many nodes are in flight. Close ends the session.
type Executor struct {
	store     Store
	sess      *session
	cfg       config
	binDigest artifacts.Digest
	binDir    *dagger.Directory // holds "orkpipe", mode 0555; its ID loaded (see inputDir)
	uploads   keyedMutex
	dirsMu    sync.Mutex
	dirs      map[artifacts.Digest]*dagger.Directory // inputDir results
	ran       atomic.Int64                           // nodes the engine ran
	cached    atomic.Int64                           // nodes the engine answered from its cache
	uploaded  atomic.Int64                           // bytes of the files handed to the engine
	tarInputs atomic.Int64                           // inputs sent in tar form
	holesOut  atomic.Int64                           // zero bytes the tar forms left out
	archiveMu sync.Mutex
	archives  string // the tar forms' directory (archiveDir), "" until the first
}

var _ engine.ProvenanceExecutor = (*Executor)(nil)

// New connects to the engine the SDK environment names (CheckEnvironment) and hashes the orkpipe
// binary (recorded in every node's provenance; uploaded like any input, by digest).
func New(ctx context.Context, store Store, opts ...Option) (*Executor, error) {
	cfg := config{connectConfig: connectConfig{timeout: 2 * time.Minute, logger: slog.Default()}}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := CheckEnvironment(); err != nil {
		return nil, err
	}
	if cfg.binary == "" {
		p, err := SelfBinary()
		if err != nil {
			return nil, fmt.Errorf("%w; pass the static linux/amd64 orkpipe binary (CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build ./cmd/orkpipe)", err)
		}
		cfg.binary = p
	}
	bin, err := artifacts.HashPath(ctx, cfg.binary)
	if err != nil {
		return nil, fmt.Errorf("hashing the orkpipe binary %s: %w", cfg.binary, err)
	}
	sess, err := connect(ctx, cfg.connectConfig)
	if err != nil {
		return nil, err
	}
	x := &Executor{store: store, sess: sess, cfg: cfg, binDigest: bin.Digest, dirs: map[artifacts.Digest]*dagger.Directory{}}
	binFile, err := x.upload(ctx, "orkpipe binary", stages.File{Path: cfg.binary, Digest: bin.Digest, Size: bin.Size})
	if err != nil {
		sess.close()
		return nil, err
	}
	x.binDir = sess.client.Directory().WithFile("orkpipe", binFile, dagger.DirectoryWithFileOpts{Permissions: 0o555})
	if _, err := x.binDir.ID(ctx); err != nil {
		sess.close()
		return nil, fmt.Errorf("uploading the orkpipe binary %s to the Dagger engine: %w", cfg.binary, err)
	}
	cfg.logger.Info("dagger executor ready", "binary", cfg.binary, "digest", bin.Digest)
	return x, nil
}

// Binary returns the path and digest of the orkpipe binary the containers run.
func (x *Executor) Binary() (string, artifacts.Digest) { return x.cfg.binary, x.binDigest }

// Stats counts the nodes this executor sent to the engine that succeeded: Ran the engine ran,
// Cached it answered from its own cache without running (their result record is that of an
// earlier run: it started before this executor sent the node). Uploaded is the bytes of the files
// handed to the engine (the binary and each distinct input once; an input in tar form counted as
// its archive), TarInputs how many inputs went in tar form and HolesLeftOut the zero bytes those
// did not send.
type Stats struct {
	Ran, Cached            int
	Uploaded, HolesLeftOut int64
	TarInputs              int
}

// Stats returns the counts so far.
func (x *Executor) Stats() Stats {
	return Stats{Ran: int(x.ran.Load()), Cached: int(x.cached.Load()), Uploaded: x.uploaded.Load(),
		HolesLeftOut: x.holesOut.Load(), TarInputs: int(x.tarInputs.Load())}
}

// Close ends the engine session and removes the tar forms it uploaded.
func (x *Executor) Close() error {
	st := x.Stats()
	x.cfg.logger.Info("dagger executor done", "nodes_ran_on_engine", st.Ran, "nodes_from_engine_cache", st.Cached,
		"uploaded_bytes", st.Uploaded, "inputs_in_tar_form", st.TarInputs, "holes_left_out_bytes", st.HolesLeftOut)
	err := x.sess.close()
	x.archiveMu.Lock()
	defer x.archiveMu.Unlock()
	if x.archives != "" {
		if rerr := os.RemoveAll(x.archives); rerr != nil && err == nil {
			err = fmt.Errorf("removing the tar forms in %s: %w", x.archives, rerr)
		}
		x.archives = ""
	}
	return err
}

// Execute implements engine.Executor.
func (x *Executor) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	outs, _, err := x.ExecuteProvenance(ctx, req)
	return outs, err
}

// ExecuteProvenance implements engine.ProvenanceExecutor: it runs the node in a container, exports
// its output directory, checks every output against the result record (and the record's binary
// against the one uploaded) and only then adopts the outputs into the store.
func (x *Executor) ExecuteProvenance(ctx context.Context, req engine.ExecRequest) (outs []artifacts.NamedObject, prov artifacts.Provenance, err error) {
	sent := time.Now()
	material, err := req.Material.Canonical()
	if err != nil {
		return nil, prov, err
	}
	tmp, err := x.store.TempDir(ctx)
	if err != nil {
		return nil, prov, fmt.Errorf("scratch directory for key %s: %w", req.Key, err)
	}
	defer func() {
		if rerr := os.RemoveAll(tmp); rerr != nil && err == nil {
			err = fmt.Errorf("removing scratch directory %s: %w", tmp, rerr)
		}
	}()
	ctr := x.sess.client.Container(dagger.ContainerOpts{Platform: "linux/amd64"}).
		WithNewFile("/node/material.json", string(material)).
		WithMountedDirectory("/node/bin", x.binDir)
	files, err := inputFiles(req)
	if err != nil {
		return nil, prov, err
	}
	dirs, err := x.inputDirs(ctx, files)
	if err != nil {
		if ctx.Err() != nil {
			return nil, prov, fmt.Errorf("key %s: %w", req.Key, ctx.Err())
		}
		return nil, prov, err
	}
	for i, f := range files {
		ctr = ctr.WithMountedDirectory("/node/in/"+f.Digest.Hex(), dirs[i])
	}
	outDir := filepath.Join(tmp, "out")
	_, err = ctr.WithExec([]string{"/node/bin/orkpipe", "node", "exec", "--key", req.Key.String(),
		"--material", "/node/material.json", "--inputs", "/node/in", "--scratch", "/node/scratch", "--output", "/node/out"}).
		Directory("/node/out").Export(ctx, outDir)
	if err != nil {
		if ctx.Err() != nil {
			return nil, prov, fmt.Errorf("key %s: %w", req.Key, ctx.Err())
		}
		var ee *dagger.ExecError
		if errors.As(err, &ee) {
			return nil, prov, fmt.Errorf("stage %q, key %s: orkpipe node exec failed in the Dagger container (exit %d); its stderr ends:\n%s",
				req.Material.Stage, req.Key, ee.ExitCode, daggerenv.Tail(ee.Stderr, 20))
		}
		return nil, prov, fmt.Errorf("stage %q, key %s: Dagger: %w", req.Material.Stage, req.Key, err)
	}
	if x.cfg.beforeIngest != nil {
		if err := x.cfg.beforeIngest(outDir); err != nil {
			return nil, prov, err
		}
	}
	outs, res, err := nodeexec.Ingest(ctx, x.store, outDir, req.Key, req.Material, nodeexec.IngestOptions{Precheck: true})
	if err != nil {
		return nil, prov, err
	}
	if res.Orkpipe.Binary != x.binDigest {
		return nil, prov, fmt.Errorf("%w: key %s: the container ran binary %s, the executor uploaded %s", nodeexec.ErrBadResult, req.Key, res.Orkpipe.Binary, x.binDigest)
	}
	if res.Start.Before(sent) {
		x.cached.Add(1)
		x.cfg.logger.Info("dagger: node answered from the engine's cache", "stage", req.Material.Stage, "key", req.Key, "ran", res.Start)
	} else {
		x.ran.Add(1)
	}
	prov = res.Provenance()
	prov.Host = "dagger:" + res.Host
	return outs, prov, nil
}

// inputDir returns the engine's directory holding f under the name of its digest (hex), or its tar
// form as <hex>.tar (tarForm), uploaded once per executor. Mounted (not copied into the
// container's root filesystem), such a directory is cached by the engine by its content: the
// container's cache key then depends only on the bytes of the inputs, never on where they lie on
// this machine.
func (x *Executor) inputDir(ctx context.Context, what string, f stages.File) (*dagger.Directory, error) {
	unlock := x.uploads.lock(f.Digest) // one ingest and one upload of a file that many nodes read
	defer unlock()
	x.dirsMu.Lock()
	dir, ok := x.dirs[f.Digest]
	x.dirsMu.Unlock()
	if ok {
		return dir, nil
	}
	p, err := x.object(ctx, what, f)
	if err != nil {
		return nil, err
	}
	name, size := f.Digest.Hex(), f.Size
	archive, holes, err := x.tarForm(ctx, f.Digest, p)
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", what, f.Digest, err)
	}
	if archive != "" {
		st, err := os.Stat(archive)
		if err != nil {
			return nil, err
		}
		p, name, size = archive, filepath.Base(archive), st.Size()
		x.tarInputs.Add(1)
		x.holesOut.Add(holes)
		x.cfg.logger.Debug("dagger: input sent in tar form", "input", what, "digest", f.Digest, "size", f.Size, "archive", size)
	}
	dir = x.sess.client.Directory().WithFile(name, x.sess.client.Host().File(p))
	// Load the ID now, under the lock: the SDK caches it in the object, which concurrent nodes
	// then only read when they marshal it.
	if _, err := dir.ID(ctx); err != nil {
		return nil, fmt.Errorf("%s (%s): uploading to the Dagger engine: %w", what, f.Digest, err)
	}
	x.uploaded.Add(size)
	x.dirsMu.Lock()
	x.dirs[f.Digest] = dir
	x.dirsMu.Unlock()
	return dir, nil
}

// inputDirs returns inputDir of every file, uploading up to uploadJobs at once.
func (x *Executor) inputDirs(ctx context.Context, files []inputFile) ([]*dagger.Directory, error) {
	dirs := make([]*dagger.Directory, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(uploadJobs)
	for i, f := range files {
		g.Go(func() error {
			var err error
			dirs[i], err = x.inputDir(gctx, fmt.Sprintf("input %q", f.name), f.File)
			return err
		})
	}
	return dirs, g.Wait()
}

// upload returns the engine's handle of f, always a store object (see object).
func (x *Executor) upload(ctx context.Context, what string, f stages.File) (*dagger.File, error) {
	p, err := x.object(ctx, what, f)
	if err != nil {
		return nil, err
	}
	x.uploaded.Add(f.Size)
	return x.sess.client.Host().File(p), nil
}

// object returns the path of f's store object, the file the engine receives (or the one its tar
// form is made of). The engine names an uploaded file by its content and its file name, and a
// store object's file name is its digest, so the upload is the same whichever store (or machine)
// the bytes come from. A file the store lacks (a source, a tool, the binary) is ingested first —
// once per store: a reflink where the filesystem has them, else a copy — and must still hash to
// f.Digest.
func (x *Executor) object(ctx context.Context, what string, f stages.File) (string, error) {
	p, err := x.store.Path(ctx, f.Digest)
	if errors.Is(err, artifacts.ErrNotFound) && f.Path != "" {
		var obj artifacts.Object
		if obj, err = x.store.IngestFile(ctx, f.Path); err != nil {
			return "", fmt.Errorf("%s (%s): %w", what, f.Digest, err)
		}
		if obj.Digest != f.Digest {
			return "", fmt.Errorf("%s: %s now hashes to %s, the node's key names %s (changed during the build?)", what, f.Path, obj.Digest, f.Digest)
		}
		x.cfg.logger.Debug("dagger: ingested into the store for upload", "file", f.Path, "digest", f.Digest)
		p, err = x.store.Path(ctx, f.Digest)
	}
	if err != nil {
		return "", fmt.Errorf("%s (%s): %w", what, f.Digest, err)
	}
	return p, nil
}

// uploadJobs bounds the uploads of one node's inputs in flight (a node may have hundreds:
// write-orkpack reads every tile entry).
const uploadJobs = 8

// keyedMutex serializes work per digest.
type keyedMutex struct {
	mu sync.Mutex
	m  map[artifacts.Digest]*sync.Mutex
}

func (k *keyedMutex) lock(d artifacts.Digest) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[artifacts.Digest]*sync.Mutex{}
	}
	m, ok := k.m[d]
	if !ok {
		m = &sync.Mutex{}
		k.m[d] = m
	}
	k.mu.Unlock()
	m.Lock()
	return m.Unlock
}

type inputFile struct {
	name string
	stages.File
}

// inputFiles lists the distinct input and tool files of req, sorted by digest (so that the
// container, and Dagger's cache key, do not depend on map order).
func inputFiles(req engine.ExecRequest) ([]inputFile, error) {
	seen := map[artifacts.Digest]bool{}
	var files []inputFile
	for _, set := range []map[string]stages.File{req.Inputs, req.Tools} {
		for name, f := range set {
			if seen[f.Digest] {
				continue
			}
			seen[f.Digest] = true
			files = append(files, inputFile{name: name, File: f})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Digest.Hex() < files[j].Digest.Hex() })
	return files, nil
}
