package nodeexec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
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
	logger       *slog.Logger
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

// Run executes the node whose canonical key material is material: it decodes it strictly, checks
// the key (WithKey), resolves every input and tool in inDir by digest, runs the stage through
// stages.Execute into outDir/outputs, hashes every output and writes outDir/result.json last. It
// returns the record it wrote. On any error no result record exists.
func Run(ctx context.Context, material []byte, inDir, outDir string, opts ...Option) (Result, error) {
	cfg := config{logger: slog.Default()}
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
	inputs, err := resolve(ctx, inDir, m.Inputs, cfg.verifyInputs)
	if err != nil {
		return Result{}, err
	}
	tools, err := resolve(ctx, inDir, m.Tools, cfg.verifyInputs)
	if err != nil {
		return Result{}, err
	}
	outputs, err := makeOutDir(outDir)
	if err != nil {
		return Result{}, err
	}
	start := time.Now().UTC()
	names, err := stages.Execute(ctx, m, inputs, tools, outputs, cfg.logger.With("key", key.String()))
	if err != nil {
		return Result{}, err
	}
	res := Result{Format: ResultFormat, Key: key, Stage: m.Stage, Version: m.Version, Start: start}
	for _, name := range names {
		obj, err := artifacts.HashPath(ctx, filepath.Join(outputs, name))
		if err != nil {
			return Result{}, fmt.Errorf("hashing output %q: %w", name, err)
		}
		res.Outputs = append(res.Outputs, artifacts.NamedObject{Name: name, Digest: obj.Digest, Size: obj.Size})
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

// resolve finds the file of every digest in set under inDir, by hex name.
func resolve(ctx context.Context, inDir string, set map[string]artifacts.Digest, verify bool) (map[string]stages.File, error) {
	files := make(map[string]stages.File, len(set))
	for name, d := range set {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := filepath.Join(inDir, d.Hex())
		st, err := os.Stat(p)
		if err == nil && st.IsDir() { // <hex>/<hex>: a directory mounted per input (Dagger)
			p = filepath.Join(p, d.Hex())
			st, err = os.Stat(p)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %q (%s): %v", ErrBadNodeDir, name, d, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: %q: %s is not a regular file", ErrBadNodeDir, name, p)
		}
		if verify {
			obj, err := artifacts.HashPath(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("hashing %q (%s): %w", name, p, err)
			}
			if obj.Digest != d {
				return nil, fmt.Errorf("%w: %q: %s hashes to %s, its name says %s", ErrBadNodeDir, name, p, obj.Digest, d)
			}
		}
		files[name] = stages.File{Path: p, Digest: d, Size: st.Size()}
	}
	return files, nil
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
