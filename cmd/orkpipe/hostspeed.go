package main

import (
	"context"
	"fmt"
	"os"

	"orkpipe/artifacts"
	"orkpipe/internal/buildinfo"
	"orkpipe/ork/hostspeed"
	"orkpipe/pipelines/build"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/progress"
)

// hostSpeedsEnv, set to "reference", plans at the reference host's speeds without measuring this
// host's (reproducible estimates; the tests' setting).
const hostSpeedsEnv = "ORKPIPE_HOST_SPEEDS"

// hostSpeeds returns this host's kernel speeds for the stages' cost model (build.WithHostSpeeds):
// measured once per host and orkpipe binary (about half a second) and kept in the cache's history
// (progress.LoadHostSpeeds), or the reference host's with ORKPIPE_HOST_SPEEDS=reference. What cannot be
// measured or kept is logged, and the reference host's speeds are used where none were measured. On
// a cache it cannot write it only reads them (readOnlyHostSpeeds).
func hostSpeeds(ctx context.Context, opts *globalOptions) (hostspeed.Speeds, error) {
	switch v := os.Getenv(hostSpeedsEnv); v {
	case "":
	case "reference":
		return hostspeed.Reference, nil
	default:
		return hostspeed.Speeds{}, usagef("%s=%q: want \"reference\" (the reference host's speeds) or unset (this host's, measured)", hostSpeedsEnv, v)
	}
	dir, err := opts.cache()
	if err != nil {
		return hostspeed.Reference, nil // openEngine reports it
	}
	bin, err := buildinfo.Get()
	if err != nil {
		opts.logger.Warn("this host's speeds not measured (the estimates are at the reference host's)", "err", err)
		return hostspeed.Reference, nil
	}
	path := progress.HostsFile(engine.HistoryDir(dir))
	if werr := artifacts.Writable(dir); werr != nil {
		return readOnlyHostSpeeds(ctx, opts, path, bin.Digest.String(), werr)
	}
	s, measured, err := progress.LoadHostSpeeds(ctx, path, hostspeed.Host(), bin.Digest.String(), hostspeed.Measure)
	if ctx.Err() != nil {
		return hostspeed.Speeds{}, ctx.Err()
	}
	if err != nil {
		if !measured {
			opts.logger.Warn("this host's speeds not measured (the estimates are at the reference host's)", "err", err)
			return hostspeed.Reference, nil
		}
		opts.logger.Warn("this host's speeds", "err", err)
	}
	if measured {
		opts.logger.Info("measured this host's kernel speeds for the estimates (once per host and binary)", "file", path,
			"speeds", describeSpeeds(s))
	}
	return s, nil
}

// readOnlyHostSpeeds is hostSpeeds on a cache this process cannot write (why, artifacts.Writable's
// error; plan and build --plan open it read-only): the speeds its hosts file keeps for this host and
// binary, else this host's measured now and not kept, which -v says (each command on that cache
// measures again; it warned on every one that it could not keep them). A damaged hosts file is
// logged, as on a writable cache.
func readOnlyHostSpeeds(ctx context.Context, opts *globalOptions, path, binary string, why error) (hostspeed.Speeds, error) {
	s, found, err := progress.ReadHostSpeeds(path, hostspeed.Host(), binary)
	if found {
		return s, nil
	}
	if err != nil {
		opts.logger.Warn("this host's speeds", "err", err)
	}
	if s, err = hostspeed.Measure(ctx); err == nil {
		err = s.Validate()
	}
	if ctx.Err() != nil {
		return hostspeed.Speeds{}, ctx.Err()
	}
	if err != nil {
		opts.logger.Warn("this host's speeds not measured (the estimates are at the reference host's)", "err", err)
		return hostspeed.Reference, nil
	}
	opts.logger.Info("measured this host's kernel speeds for the estimates; not kept, the cache being read-only (each command on it measures them again)",
		"file", path, "why", why, "speeds", describeSpeeds(s))
	return s, nil
}

// describeSpeeds is s in a line: "forward 1.02x, hessian 0.98x, ...".
func describeSpeeds(s hostspeed.Speeds) string {
	return fmt.Sprintf("forward %.2fx, hessian %.2fx, dgemm %.2fx, intmatmul %.2fx, scalar %.2fx", s.Forward, s.Hessian, s.Dgemm, s.IntMatMul, s.Scalar)
}

// speedsSource asks hostSpeeds once, when a target's graph is made (build.WithHostSpeeds), and
// keeps what it gave for the plan's estimate line.
type speedsSource struct {
	opts   *globalOptions
	speeds *hostspeed.Speeds // nil until asked
}

func (s *speedsSource) get(ctx context.Context) (hostspeed.Speeds, error) {
	if s.speeds == nil {
		sp, err := hostSpeeds(ctx, s.opts)
		if err != nil {
			return hostspeed.Speeds{}, err
		}
		s.speeds = &sp
	}
	return *s.speeds, nil
}

func (s *speedsSource) option() build.Option { return build.WithHostSpeeds(s.get) }

// describe says at what speed the modeled costs are: this host's, measured (the range of its kernels'
// speeds), or the reference host's.
func (s *speedsSource) describe() string {
	if s == nil || s.speeds == nil || *s.speeds == hostspeed.Reference {
		return "the reference host's speed"
	}
	sp := *s.speeds
	lo, hi := sp.Forward, sp.Forward
	for _, v := range []float64{sp.Hessian, sp.Dgemm, sp.IntMatMul, sp.Scalar} {
		lo, hi = min(lo, v), max(hi, v)
	}
	return fmt.Sprintf("this host's measured speed, %.2f-%.2fx the reference host's", lo, hi)
}
