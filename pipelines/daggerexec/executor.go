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
	"time"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/nodeexec"
	"orkpipe/stages"
)

// Store is what the executor needs of the local store: a scratch directory on its filesystem to
// export into, and adoption of verified files. *artifacts.Store implements it.
type Store interface {
	TempDir(ctx context.Context) (string, error)
	nodeexec.Adopter
}

// Option configures New. Options validate themselves.
type Option func(*config) error

type config struct {
	connectConfig
	binary       string
	beforeIngest func(outDir string) error
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
	binID     string
}

var _ engine.ProvenanceExecutor = (*Executor)(nil)

// New connects to the engine the SDK environment names (CheckEnvironment), hashes the orkpipe
// binary (recorded in every node's provenance) and uploads it once.
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
	x := &Executor{store: store, sess: sess, cfg: cfg, binDigest: bin.Digest}
	if x.binID, err = x.hostFile(ctx, cfg.binary); err != nil {
		sess.close()
		return nil, err
	}
	cfg.logger.Info("dagger executor ready", "binary", cfg.binary, "digest", bin.Digest)
	return x, nil
}

// Binary returns the path and digest of the orkpipe binary the containers run.
func (x *Executor) Binary() (string, artifacts.Digest) { return x.cfg.binary, x.binDigest }

// Close ends the engine session.
func (x *Executor) Close() error { return x.sess.close() }

// Execute implements engine.Executor.
func (x *Executor) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	outs, _, err := x.ExecuteProvenance(ctx, req)
	return outs, err
}

// ExecuteProvenance implements engine.ProvenanceExecutor: it runs the node in a container, exports
// its output directory, checks every output against the result record (and the record's binary
// against the one uploaded) and only then adopts the outputs into the store.
func (x *Executor) ExecuteProvenance(ctx context.Context, req engine.ExecRequest) (outs []artifacts.NamedObject, prov artifacts.Provenance, err error) {
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
	q := x.sess.query().Select("container").Arg("platform", "linux/amd64").
		Select("withFile").Arg("path", "/orkpipe").Arg("source", x.binID).Arg("permissions", 0o555).
		Select("withNewFile").Arg("path", "/node/material.json").Arg("contents", string(material))
	files, err := inputFiles(req)
	if err != nil {
		return nil, prov, err
	}
	for _, f := range files {
		id, err := x.hostFile(ctx, f.path)
		if err != nil {
			return nil, prov, fmt.Errorf("input %q: %w", f.name, err)
		}
		q = q.Select("withFile").Arg("path", "/node/in/"+f.digest.Hex()).Arg("source", id)
	}
	outDir := filepath.Join(tmp, "out")
	var exported string
	q = q.Select("withExec").Arg("args", []string{"/orkpipe", "node", "exec", "--key", req.Key.String(),
		"--material", "/node/material.json", "--inputs", "/node/in", "--output", "/node/out"}).
		Select("directory").Arg("path", "/node/out").
		Select("export").Arg("path", outDir).Bind(&exported)
	if err := q.Execute(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, prov, fmt.Errorf("key %s: %w", req.Key, ctx.Err())
		}
		var ee *execError
		if errors.As(err, &ee) {
			return nil, prov, fmt.Errorf("stage %q, key %s: orkpipe node exec failed in the Dagger container (exit %d); its stderr ends:\n%s",
				req.Material.Stage, req.Key, ee.ExitCode, tail(ee.Stderr, 20))
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
	prov = res.Provenance()
	prov.Host = "dagger:" + res.Host
	return outs, prov, nil
}

// hostFile returns the engine's ID of a file on this host (uploaded through the session).
func (x *Executor) hostFile(ctx context.Context, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", err
	}
	var id string
	if err := x.sess.query().Select("host").Select("file").Arg("path", abs).Select("id").Bind(&id).Execute(ctx); err != nil {
		return "", fmt.Errorf("Dagger: loading %s: %w", abs, err)
	}
	return id, nil
}

type inputFile struct {
	name   string
	digest artifacts.Digest
	path   string
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
			if _, err := os.Stat(f.Path); err != nil {
				return nil, fmt.Errorf("input %q (%s): %w", name, f.Digest, err)
			}
			files = append(files, inputFile{name: name, digest: f.Digest, path: f.Path})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].digest.Hex() < files[j].digest.Hex() })
	return files, nil
}
