package procexec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"orkpipe/pipelines/engine"
)

// maxLine bounds a request line (a node's key material and file lists: kilobytes; write-orkpack of a
// 27B model names ~1,000 inputs).
const maxLine = 64 << 20

// Serve is the child's side of the protocol (package doc): it sends hello (its Protocol field set
// to this package's), then runs every request it reads from r with x, each in its own goroutine,
// and writes each answer to w. It returns when r ends (nil, after canceling and waiting for the
// nodes still running), when ctx ends (ctx's error, the same way) or on a request it cannot read
// (an error wrapping ErrChild). It does not close x.
func Serve(ctx context.Context, r io.Reader, w io.Writer, hello Hello, x engine.ProvenanceExecutor) error {
	out := &replyWriter{enc: json.NewEncoder(w)}
	hello.Protocol = Protocol
	if err := out.send(reply{Hello: &hello}); err != nil {
		return fmt.Errorf("%w: sending hello: %w", ErrChild, err)
	}
	ctx, cancelAll := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		running = map[uint64]context.CancelFunc{}
	)
	defer func() {
		cancelAll() // what is still running when the requests end is abandoned
		wg.Wait()
	}()
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 0, 64<<10), maxLine)
	for lines.Scan() {
		var req request
		if err := json.Unmarshal(lines.Bytes(), &req); err != nil {
			return fmt.Errorf("%w: reading a request: %w", ErrChild, err)
		}
		switch {
		case req.ID == 0 || (req.Exec == nil) == !req.Cancel:
			return fmt.Errorf("%w: request %d: want an id > 0 and exactly one of exec or cancel", ErrChild, req.ID)
		case req.Cancel:
			mu.Lock()
			if cancel, ok := running[req.ID]; ok {
				cancel()
			}
			mu.Unlock()
			continue
		}
		nctx, cancel := context.WithCancel(ctx)
		mu.Lock()
		if _, dup := running[req.ID]; dup {
			mu.Unlock()
			cancel()
			return fmt.Errorf("%w: request %d sent twice", ErrChild, req.ID)
		}
		running[req.ID] = cancel
		mu.Unlock()
		wg.Add(1)
		go func(id uint64, er engine.ExecRequest) {
			defer wg.Done()
			outs, prov, err := x.ExecuteProvenance(nctx, er)
			mu.Lock()
			delete(running, id)
			mu.Unlock()
			cancel()
			rep := reply{ID: id, Outputs: outs, Provenance: &prov}
			if err != nil {
				rep = errorReply(id, err)
			}
			out.send(rep) // a parent gone away reads nothing more; r ends next
		}(req.ID, *req.Exec)
	}
	if err := lines.Err(); err != nil {
		return fmt.Errorf("%w: reading requests: %w", ErrChild, err)
	}
	return ctx.Err() // nil unless the caller's ctx ended
}

// Refuse is what a child sends instead of hello when its executor cannot start: err, with the
// sentinels it wraps. The parent's Start returns it.
func Refuse(w io.Writer, err error) error {
	return (&replyWriter{enc: json.NewEncoder(w)}).send(errorReply(0, err))
}

// replyWriter sends replies one whole line at a time.
type replyWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (o *replyWriter) send(r reply) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.enc.Encode(r)
}
