package daggerexec

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"dagger.io/dagger/engineconn"
)

// cliConn is an engineconn.EngineConn over a `dagger session` process that this package starts
// itself, handed to dagger.Connect with dagger.WithConn. It does what the SDK's own CLI session
// does (same command line, environment and handshake: one JSON line {port, session_token} on
// stdout, then HTTP on 127.0.0.1:port with the token as basic-auth user; closing stdin ends the
// session) with one difference: when the CLI ends before its session starts, the error carries
// the CLI's whole stderr. The SDK (v0.18.14, engineconn/session.go) appends its stderr buffer to
// the error without waiting for the goroutine that fills it, so a fast failure ("connection
// refused") often came back as a bare "failed to read session params: EOF"; here exec.Cmd.Wait
// returns only once stderr is copied.
type cliConn struct {
	*http.Client
	cmd   *exec.Cmd
	stdin io.Closer
	once  sync.Once
	err   error
}

var _ engineconn.EngineConn = (*cliConn)(nil)

// sessionWaitDelay bounds how long Close waits for the CLI to exit after its stdin closed (the
// SDK allows this long for the CLI to flush its cache exports).
const sessionWaitDelay = 5 * time.Minute

// stderrKeep is how much of the CLI's stderr an error quotes (its end).
const stderrKeep = 16 << 10

// startCLISession starts `bin session` and reads its connect parameters. The process lives until
// Close (or until ctx is canceled, which closes its stdin).
func startCLISession(ctx context.Context, bin, runnerHost string, logOutput io.Writer) (*cliConn, error) {
	cmd := exec.CommandContext(ctx, bin, "session",
		"--label", "dagger.io/sdk.name:go", "--label", "dagger.io/sdk.version:"+cliVersion)
	cmd.Env = os.Environ()
	if runnerHost != "" {
		cmd.Env = append(cmd.Env, EnvRunnerHost+"="+runnerHost)
	}
	stderr := &tailBuffer{max: stderrKeep}
	cmd.Stderr = stderr
	if logOutput != nil {
		cmd.Stderr = io.MultiWriter(stderr, logOutput)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Cancel = stdin.Close // the CLI ends its session when its stdin closes
	cmd.WaitDelay = sessionWaitDelay
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s session: %w", bin, err)
	}
	line, rerr := bufio.NewReader(stdout).ReadBytes('\n')
	var params engineconn.ConnectParams
	if rerr == nil {
		if err := json.Unmarshal(line, &params); err != nil || params.Port <= 0 || params.SessionToken == "" {
			rerr = fmt.Errorf("%s session printed %q, want its connect parameters {\"port\":…,\"session_token\":…}", bin, line)
		}
	}
	if rerr != nil {
		stdin.Close()
		werr := cmd.Wait() // after this, stderr holds everything the CLI wrote
		msg := fmt.Sprintf("%s session ended before its session started (%v", bin, rerr)
		if werr != nil {
			msg += "; " + werr.Error()
		}
		return nil, errors.New(msg + "); its stderr: " + strings.TrimSpace(stderr.String()))
	}
	go io.Copy(io.Discard, stdout) // the CLI may log to stdout; never let it block
	dial := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(params.Port)))
	}}
	client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r.SetBasicAuth(params.SessionToken, "")
		return dial.RoundTrip(r)
	})}
	return &cliConn{Client: client, cmd: cmd, stdin: stdin}, nil
}

// Host implements engineconn.EngineConn: the host part of the GraphQL URL (the dialer ignores it).
func (c *cliConn) Host() string { return "dagger" }

// Close ends the session: it closes the CLI's stdin and waits for it to exit.
func (c *cliConn) Close() error {
	c.once.Do(func() {
		c.stdin.Close()
		if err := c.cmd.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			c.err = fmt.Errorf("dagger session: %w", err)
		}
	})
	return c.err
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
