package verify

import (
	"fmt"
	"log/slog"

	"orkpipe/ork/board"
	"orkpipe/ork/boardhost"
)

// Option configures Dir. Options validate their argument.
type Option func(*config) error

type config struct {
	profile   *board.Profile
	command   string
	text      string
	allowZero []string
	collect   []boardhost.CollectOption
	run       []boardhost.RunOption
	jobs      int
	logger    *slog.Logger
}

// WithProfile sets the board profile the pack must fit (default: the built-in profile named in the
// pack's index; a pack planned for a profile that is not built in then needs this option).
func WithProfile(p board.Profile) Option {
	return func(c *config) error {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("%w: board profile: %v", ErrOption, err)
		}
		c.profile = &p
		return nil
	}
}

// WithRun runs command (boardhost.SplitCommand syntax, {pack} {stub} {text} placeholders) after
// the checks, with text as {text} (may be empty when the command does not name it).
func WithRun(command, text string, opts ...boardhost.RunOption) Option {
	return func(c *config) error {
		if command == "" {
			return fmt.Errorf("%w: run command is empty", ErrOption)
		}
		if _, err := boardhost.SplitCommand(command); err != nil {
			return fmt.Errorf("%w: %v", ErrOption, err)
		}
		c.command, c.text = command, text
		c.run = append(c.run, opts...)
		return nil
	}
}

// WithCollect passes options to the host fingerprint (boardhost.Collect).
func WithCollect(opts ...boardhost.CollectOption) Option {
	return func(c *config) error {
		c.collect = append(c.collect, opts...)
		return nil
	}
}

// WithAllowZero names non-owned stub tensors that are legitimately all zero (gguf.WithAllowZero).
func WithAllowZero(names ...string) Option {
	return func(c *config) error {
		for _, n := range names {
			if n == "" {
				return fmt.Errorf("%w: empty tensor name in allow-zero list", ErrOption)
			}
		}
		c.allowZero = append(c.allowZero, names...)
		return nil
	}
}

// WithJobs sets how many files are hashed at once for the integrity check (default 2).
func WithJobs(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: jobs must be at least 1, got %d", ErrOption, n)
		}
		c.jobs = n
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrOption)
		}
		c.logger = l
		return nil
	}
}

func makeConfig(opts []Option) (*config, error) {
	c := &config{jobs: 2, logger: slog.Default()}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}
