package procexec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sync"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
)

// Client runs nodes in a child process (package doc). It is safe for concurrent use: requests are
// multiplexed over the one pipe. Close ends the child.
type Client struct {
	cmd   *exec.Cmd
	hello Hello

	sendMu sync.Mutex
	stdin  io.WriteCloser
	enc    *json.Encoder

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan reply
	broken  error         // set once the child broke the protocol or exited; every call fails with it
	badLine error         // the protocol error that ended the session, if one did
	done    chan struct{} // closed when the child's stdout ends
	waitErr error         // cmd.Wait's, set before done is closed
}

var _ engine.ProvenanceExecutor = (*Client)(nil)

// Start starts cmd (its Stdin and Stdout must be unset: they are the protocol's pipes; its Stderr
// is the child's log) and waits for its hello. A child that refuses to start, speaks another
// protocol version or says nothing before ctx ends is killed and reaped, and the error wraps
// ErrChild; a refusal's keeps the child's message whole and wraps the sentinels it names.
func Start(ctx context.Context, cmd *exec.Cmd) (*Client, error) {
	if cmd.Stdin != nil || cmd.Stdout != nil {
		return nil, fmt.Errorf("%w: %s: Stdin and Stdout must be unset", ErrChild, cmd.Path)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrChild, cmd.Path, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrChild, cmd.Path, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: starting %s: %w", ErrChild, cmd.Path, err)
	}
	c := &Client{cmd: cmd, stdin: stdin, enc: json.NewEncoder(stdin), waiting: map[uint64]chan reply{}, done: make(chan struct{})}
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 0, 64<<10), maxLine)
	first := make(chan error, 1)
	go func() {
		first <- c.readHello(lines)
	}()
	select {
	case err = <-first:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-first // the kill ends stdout
		err = fmt.Errorf("%w: %s said nothing: %w", ErrChild, cmd.Path, ctx.Err())
	}
	if err != nil {
		cmd.Process.Kill()
		stdin.Close()
		cmd.Wait()
		return nil, err
	}
	go c.readReplies(lines)
	return c, nil
}

// readHello reads the child's first line: its hello, or its refusal to start.
func (c *Client) readHello(lines *bufio.Scanner) error {
	if !lines.Scan() {
		return fmt.Errorf("%w: %s exited before its hello (%v; its log is on stderr)", ErrChild, c.cmd.Path, lines.Err())
	}
	var r reply
	if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
		return fmt.Errorf("%w: %s: reading its hello: %w", ErrChild, c.cmd.Path, err)
	}
	switch {
	case r.Error != "":
		return fmt.Errorf("%w: %s: %w", ErrChild, c.cmd.Path, r.remote())
	case r.Hello == nil:
		return fmt.Errorf("%w: %s: its first line is not a hello: %.200s", ErrChild, c.cmd.Path, lines.Bytes())
	case r.Hello.Protocol != Protocol:
		return fmt.Errorf("%w: %s speaks protocol %d, this orkpipe %d: build both from one tree", ErrChild, c.cmd.Path, r.Hello.Protocol, Protocol)
	}
	c.hello = *r.Hello
	return nil
}

// readReplies hands every reply to its waiting request until the child's stdout ends; then it
// reaps the child and fails every request still waiting.
func (c *Client) readReplies(lines *bufio.Scanner) {
	var bad error
	for bad == nil && lines.Scan() {
		var r reply
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			bad = fmt.Errorf("%w: %s: reading a reply: %w", ErrChild, c.cmd.Path, err)
			break
		}
		c.mu.Lock()
		ch, ok := c.waiting[r.ID]
		delete(c.waiting, r.ID)
		c.mu.Unlock()
		if !ok || r.Hello != nil {
			bad = fmt.Errorf("%w: %s: a reply to request %d, which is not waiting", ErrChild, c.cmd.Path, r.ID)
			break
		}
		ch <- r // buffered
	}
	if bad != nil {
		c.cmd.Process.Kill()
	}
	waitErr := c.cmd.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.badLine = bad
	if bad == nil {
		bad = fmt.Errorf("%w: %s exited (%v; its log is on stderr)", ErrChild, c.cmd.Path, waitErr)
	}
	if c.broken == nil {
		c.broken = bad
	}
	c.waitErr = waitErr
	for id, ch := range c.waiting {
		delete(c.waiting, id)
		close(ch)
	}
	close(c.done)
}

// Hello returns what the child said it is.
func (c *Client) Hello() Hello { return c.hello }

// Execute implements engine.Executor.
func (c *Client) Execute(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, error) {
	outs, _, err := c.ExecuteProvenance(ctx, req)
	return outs, err
}

// ExecuteProvenance implements engine.ProvenanceExecutor: the child runs the node. When ctx ends
// first, the child is told to cancel it and the call returns once the child has answered, with an
// error wrapping ctx's.
func (c *Client) ExecuteProvenance(ctx context.Context, req engine.ExecRequest) ([]artifacts.NamedObject, artifacts.Provenance, error) {
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.broken != nil {
		err := c.broken
		c.mu.Unlock()
		return nil, artifacts.Provenance{}, err
	}
	c.nextID++
	id := c.nextID
	c.waiting[id] = ch
	c.mu.Unlock()
	if err := c.send(request{ID: id, Exec: &req}); err != nil {
		c.forget(id)
		return nil, artifacts.Provenance{}, err
	}
	var r reply
	var ok bool
	select {
	case r, ok = <-ch:
	case <-ctx.Done():
		c.send(request{ID: id, Cancel: true}) // a child gone away closes ch
		r, ok = <-ch
		if !ok || r.Error == "" {
			return nil, artifacts.Provenance{}, fmt.Errorf("node %s: %w", req.Key, ctx.Err())
		}
		return nil, artifacts.Provenance{}, fmt.Errorf("node %s: %w (the executor process: %w)", req.Key, ctx.Err(), r.remote())
	}
	if !ok {
		c.mu.Lock()
		err := c.broken
		c.mu.Unlock()
		return nil, artifacts.Provenance{}, err
	}
	if r.Error != "" {
		return nil, artifacts.Provenance{}, r.remote()
	}
	var prov artifacts.Provenance
	if r.Provenance != nil {
		prov = *r.Provenance
	}
	return r.Outputs, prov, nil
}

// send writes one request line.
func (c *Client) send(r request) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.enc.Encode(r); err != nil {
		return fmt.Errorf("%w: %s: sending request %d: %w", ErrChild, c.cmd.Path, r.ID, err)
	}
	return nil
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.waiting, id)
	c.mu.Unlock()
}

// Close ends the session (package doc) and waits for the child to exit. It returns an error when
// the child exits with a failure, or broke the protocol.
func (c *Client) Close() error {
	c.sendMu.Lock()
	c.stdin.Close()
	c.sendMu.Unlock()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.badLine != nil {
		return c.badLine
	}
	if c.waitErr != nil {
		return fmt.Errorf("%w: %s: %w", ErrChild, c.cmd.Path, c.waitErr)
	}
	return nil
}
