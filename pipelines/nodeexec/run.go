package nodeexec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"orkpipe/artifacts"
	"orkpipe/internal/buildinfo"
	"orkpipe/stages"
)

// Option configures Run. Options validate themselves.
type Option func(*config) error

type config struct {
	key          artifacts.Digest
	verifyInputs bool
	scratch      string
	logger       *slog.Logger
	memoryLimit  bool
}

// WithKey makes Run refuse key material whose key is not key (the exec line names the key, so a
// material file swapped for another is caught, and identical nodes share Dagger's cache).
func WithKey(key artifacts.Digest) Option {
	return func(c *config) error {
		if key.IsZero() {
			return fmt.Errorf("nodeexec: WithKey: zero digest")
		}
		c.key = key
		return nil
	}
}

// WithVerifyInputs re-hashes every input and tool file before the stage runs and refuses one
// whose bytes do not match its name. `orkpipe node exec` verifies (the files crossed a boundary);
// the local executor does not, because the engine verified them in the store just before.
func WithVerifyInputs(on bool) Option {
	return func(c *config) error { c.verifyInputs = on; return nil }
}

// WithScratch sets the directory under which Run unpacks the inputs that arrive in their tar form
// (default os.TempDir()); it is created if absent. Run's own directory there is removed before
// Run returns.
func WithScratch(dir string) Option {
	return func(c *config) error {
		if dir == "" {
			return fmt.Errorf("nodeexec: WithScratch: empty directory")
		}
		c.scratch = dir
		return nil
	}
}

// WithLogger sets the logger handed to the stage (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("nodeexec: WithLogger: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithMemoryLimit makes Run hold the Go runtime's memory limit (debug.SetMemoryLimit) at the node's
// declared peak memory (stages.Spec.PeakMemory) while the stage runs, and put the previous limit
// back when it returns; a lower limit already set is kept. A process that runs one node alone
// (`orkpipe node exec`, where the process has no GOMEMLIMIT) then collects its garbage before it
// outgrows what the build planned for the node, as a build process collects under --mem; without
// a limit the collector lets the heap grow to twice what lives in it after a collection, and
// memory a stage holds outside the heap (internal/hugebuf) does not count towards that. The
// engine's local executor runs nodes inside the build process, under the build's limit, and does
// not ask for it.
func WithMemoryLimit(on bool) Option {
	return func(c *config) error { c.memoryLimit = on; return nil }
}

// Run executes the node whose canonical key material is material: it decodes it strictly, checks
// the key (WithKey), resolves every input and tool in inDir by digest (unpacking those in tar
// form into a scratch directory, removed when Run returns), runs the stage through
// stages.Execute into outDir/outputs, hashes every output and writes outDir/result.json last. It
// returns the record it wrote, with the stamps of its hashes (Result.Hashed). On any error no result record exists.
func Run(ctx context.Context, material []byte, inDir, outDir string, opts ...Option) (res Result, err error) {
	cfg := config{logger: slog.Default(), scratch: os.TempDir()}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return Result{}, err
		}
	}
	m, err := stages.DecodeKeyMaterial(material)
	if err != nil {
		return Result{}, err
	}
	key, err := m.Key()
	if err != nil {
		return Result{}, err
	}
	if !cfg.key.IsZero() && key != cfg.key {
		return Result{}, fmt.Errorf("%w: key material hashes to %s, the node key given is %s", ErrBadNodeDir, key, cfg.key)
	}
	r := &resolver{inDir: inDir, verify: cfg.verifyInputs, scratchRoot: cfg.scratch}
	defer func() {
		if rerr := r.close(); rerr != nil && err == nil {
			res, err = Result{}, rerr
		}
	}()
	inputs, err := r.resolve(ctx, m.Inputs)
	if err != nil {
		return Result{}, err
	}
	tools, err := r.resolve(ctx, m.Tools)
	if err != nil {
		return Result{}, err
	}
	outputs, err := makeOutDir(outDir)
	if err != nil {
		return Result{}, err
	}
	if cfg.memoryLimit {
		b, err := stages.Bind(m)
		if err != nil {
			return Result{}, err
		}
		if peak, prev := b.Spec().PeakMemory, debug.SetMemoryLimit(-1); peak > 0 && peak < prev {
			debug.SetMemoryLimit(peak)
			defer debug.SetMemoryLimit(prev)
			cfg.logger.Debug("node exec: Go memory limit at the node's declared peak", "key", key.String(), "limit", peak)
		}
	}
	start := time.Now().UTC()
	names, err := stages.Execute(ctx, m, inputs, tools, outputs, cfg.logger.With("key", key.String()))
	if err != nil {
		return Result{}, err
	}
	res = Result{Format: ResultFormat, Key: key, Stage: m.Stage, Version: m.Version, Start: start}
	res.Hashed = make(map[string]artifacts.HashedFile, len(names))
	for _, name := range names {
		h, err := artifacts.HashStamped(ctx, filepath.Join(outputs, name))
		if err != nil {
			return Result{}, fmt.Errorf("hashing output %q: %w", name, err)
		}
		res.Outputs = append(res.Outputs, artifacts.NamedObject{Name: name, Digest: h.Digest, Size: h.Size})
		res.Hashed[name] = h
	}
	info, err := buildinfo.Get()
	if err != nil {
		return Result{}, fmt.Errorf("describing this binary for the result record: %w", err)
	}
	res.Orkpipe = artifacts.OrkpipeBuild{Version: info.Version, Revision: info.Revision, Dirty: info.Dirty, Binary: info.Digest}
	if res.Host, err = os.Hostname(); err != nil {
		res.Host = "unknown"
	}
	res.End = time.Now().UTC()
	b, err := encodeResult(res)
	if err != nil {
		return Result{}, err
	}
	if err := os.WriteFile(filepath.Join(outDir, ResultFile), b, 0o644); err != nil {
		return Result{}, fmt.Errorf("writing the result record: %w", err)
	}
	return res, nil
}

// makeOutDir creates outDir (or accepts it empty) and its outputs directory.
func makeOutDir(outDir string) (string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("%w: output directory: %v", ErrBadNodeDir, err)
	}
	ents, err := os.ReadDir(outDir)
	if err != nil {
		return "", fmt.Errorf("%w: output directory: %v", ErrBadNodeDir, err)
	}
	if len(ents) > 0 {
		return "", fmt.Errorf("%w: output directory %s is not empty (holds %s)", ErrBadNodeDir, outDir, ents[0].Name())
	}
	outputs := filepath.Join(outDir, OutputsDir)
	if err := os.Mkdir(outputs, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("%w: %v", ErrBadNodeDir, err)
	}
	return outputs, nil
}
