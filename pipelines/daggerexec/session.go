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

	"dagger.io/dagger/querybuilder"
	"github.com/Khan/genqlient/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// Why not dagger.Connect: the SDK's root package imports dagger.io/dagger/telemetry, which in
// v0.18.14 is written against go.opentelemetry.io/otel/log v0.12; this module also depends on
// github.com/distribution/distribution/v3 v3.1.2, which requires otel/log v0.21, and minimal
// version selection picks v0.21 — under which the SDK's telemetry package does not compile. So
// this file opens the session exactly as the SDK's engineconn does (a `dagger session` CLI process
// printing {"port","session_token"} on its first stdout line, or DAGGER_SESSION_PORT/TOKEN inside
// `dagger run`) and talks to the engine's GraphQL API through the SDK's own querybuilder and the
// same genqlient client. The engine and its API are Dagger's; nothing is reimplemented.

// session is an open connection to an engine.
type session struct {
	gql    graphql.Client
	proc   *exec.Cmd      // nil inside `dagger run`
	stdin  io.WriteCloser // closing it ends the CLI session
	stderr *tailBuffer
	wait   sync.WaitGroup
	cancel context.CancelFunc
}

// query returns the root of a query on this session.
func (s *session) query() *querybuilder.Selection { return querybuilder.Query().Client(s.gql) }

// close ends the session: the CLI drains and exits when its stdin closes.
func (s *session) close() error {
	var err error
	if s.proc != nil {
		s.stdin.Close()
		s.drainStderr()
		err = s.proc.Wait()
	}
	if s.cancel != nil {
		s.cancel()
	}
	return err
}

// drainStderr waits (up to 10s) for the CLI's stderr to reach EOF, which it does when the CLI
// exits; only then may Wait close the pipe without losing its last words.
func (s *session) drainStderr() {
	done := make(chan struct{})
	go func() { s.wait.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// connectParams is the first line a `dagger session` prints.
type connectParams struct {
	Port         int    `json:"port"`
	SessionToken string `json:"session_token"`
}

// startSession connects through DAGGER_SESSION_PORT/TOKEN when set, and otherwise starts
// `dagger session` with the CLI named by _EXPERIMENTAL_DAGGER_CLI_BIN (or the one the SDK cached).
func startSession(ctx context.Context, cfg connectConfig) (*session, error) {
	if port := os.Getenv(envSessionPort); port != "" {
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %v", envSessionPort, port, err)
		}
		token := os.Getenv("DAGGER_SESSION_TOKEN")
		if token == "" {
			return nil, fmt.Errorf("DAGGER_SESSION_TOKEN must be set with %s", envSessionPort)
		}
		return &session{gql: newGraphQL(connectParams{Port: p, SessionToken: token})}, nil
	}
	bin := os.Getenv(EnvCLIBin)
	if bin == "" {
		bin = downloadedCLI()
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("dagger CLI %q: %w", bin, err)
	}
	cmd := exec.CommandContext(ctx, path, "session",
		"--label", "dagger.io/sdk.name:go", "--label", "dagger.io/sdk.version:"+cliVersion)
	cmd.Env = os.Environ()
	if cfg.runnerHost != "" {
		cmd.Env = append(cmd.Env, EnvRunnerHost+"="+cfg.runnerHost)
	}
	s := &session{proc: cmd, stderr: &tailBuffer{max: 64 << 10}}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	cmd.Cancel = s.stdin.Close
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s session: %w", path, err)
	}
	var logOut io.Writer = io.Discard
	if cfg.logOutput != nil {
		logOut = cfg.logOutput
	}
	s.wait.Add(1)
	go func() {
		defer s.wait.Done()
		io.Copy(io.MultiWriter(logOut, s.stderr), stderr)
	}()
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		s.stdin.Close()
		s.drainStderr()
		werr := cmd.Wait()
		return nil, fmt.Errorf("%s session exited before it was ready (%v, %v): %s", path, err, werr, s.stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	var params connectParams
	if err := json.Unmarshal(line, &params); err != nil || params.Port == 0 {
		s.close()
		return nil, fmt.Errorf("%s session: unreadable connect parameters %q: %v", path, line, err)
	}
	s.gql = newGraphQL(params)
	return s, nil
}

// newGraphQL returns a GraphQL client for the session on 127.0.0.1:port, authenticated with its
// token, whose errors carry exec failures as *execError.
func newGraphQL(p connectParams) graphql.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(p.Port))
	}}
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r.SetBasicAuth(p.SessionToken, "")
		return tr.RoundTrip(r)
	})}
	return execErrors{graphql.NewClient("http://dagger/query", hc)}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// execError is a failed exec in a container: its exit code and output (the SDK's ExecError).
type execError struct {
	msg      string
	ExitCode int
	Stdout   string
	Stderr   string
}

func (e *execError) Error() string { return e.msg }

// execErrors turns GraphQL errors of type EXEC_ERROR into *execError, as the SDK does.
type execErrors struct{ graphql.Client }

func (c execErrors) MakeRequest(ctx context.Context, req *graphql.Request, resp *graphql.Response) error {
	err := c.Client.MakeRequest(ctx, req, resp)
	var ge *gqlerror.Error
	if err == nil || !errors.As(err, &ge) {
		return err
	}
	if typ, _ := ge.Extensions["_type"].(string); typ != "EXEC_ERROR" {
		return err
	}
	e := &execError{msg: ge.Message}
	if code, ok := ge.Extensions["exitCode"].(float64); ok {
		e.ExitCode = int(code)
	}
	e.Stdout, _ = ge.Extensions["stdout"].(string)
	e.Stderr, _ = ge.Extensions["stderr"].(string)
	return e
}

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
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
