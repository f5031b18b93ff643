package engine

import (
	"fmt"
	"log/slog"
	"time"
)

// Option configures an Engine. Options validate their argument and New reports the first error.
type Option func(*config) error

type config struct {
	jobs       int
	mem        int64
	sink       Sink
	logger     *slog.Logger
	keepGoing  bool
	executor   Executor
	historyDir string
	maxPasses  int
	// verifyNotice: how long a node's input verification runs before node_verifying is emitted
	verifyNotice time.Duration
}

// WithJobs sets how many nodes run at once (default 1).
func WithJobs(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("engine: jobs %d, want >= 1", n)
		}
		c.jobs = n
		return nil
	}
}

// WithMemoryBudget sets the memory budget in bytes: the declared peak memory of the nodes running
// at once never sums above it, and a node declaring more fails at plan time. Required.
func WithMemoryBudget(bytes int64) Option {
	return func(c *config) error {
		if bytes <= 0 {
			return fmt.Errorf("engine: memory budget %d bytes, want > 0", bytes)
		}
		c.mem = bytes
		return nil
	}
}

// WithSink sends build events to s (default: discarded).
func WithSink(s Sink) Option {
	return func(c *config) error {
		if s == nil {
			return fmt.Errorf("engine: nil sink")
		}
		c.sink = s
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("engine: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithKeepGoing keeps running branches independent of a failed node (default: the first failure
// cancels the build).
func WithKeepGoing(on bool) Option {
	return func(c *config) error { c.keepGoing = on; return nil }
}

// WithExecutor runs nodes through x (default: a Local executor on the engine's store).
func WithExecutor(x Executor) Option {
	return func(c *config) error {
		if x == nil {
			return fmt.Errorf("engine: nil executor")
		}
		c.executor = x
		return nil
	}
}

// WithHistoryDir sets where the key materials of each build are recorded per target name (for
// explain). Default: <store dir>/history.
func WithHistoryDir(dir string) Option {
	return func(c *config) error {
		if dir == "" {
			return fmt.Errorf("engine: empty history dir")
		}
		c.historyDir = dir
		return nil
	}
}

// WithVerifyNotice sets how long verifying a node's input objects (re-hashing those an earlier
// process stored) may run before the engine emits node_verifying for it (default one second; 0:
// for every executed node with inputs from other nodes, before it verifies them).
func WithVerifyNotice(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("engine: verify notice %v, want >= 0", d)
		}
		c.verifyNotice = d
		return nil
	}
}
