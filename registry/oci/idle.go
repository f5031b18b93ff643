package oci

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// idleBody is a blob download's response body that fails with ErrStalled once no byte has arrived for
// idle, from the request on: a timer, reset by every read that returns bytes, cancels the request's
// context (a stalled connection held a pull forever: http.DefaultTransport has no read deadline).
type idleBody struct {
	parent  context.Context
	ctx     context.Context // the request's
	cancel  context.CancelFunc
	timer   *time.Timer
	stalled atomic.Bool
	idle    time.Duration
	digest  string
	rc      io.ReadCloser // the response body, once there is one
}

func newIdleBody(parent context.Context, idle time.Duration, digest string) *idleBody {
	b := &idleBody{parent: parent, idle: idle, digest: digest}
	b.ctx, b.cancel = context.WithCancel(parent)
	b.timer = time.AfterFunc(idle, func() {
		b.stalled.Store(true)
		b.cancel()
	})
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && !b.stalled.Load() {
		b.timer.Reset(b.idle)
	}
	if err != nil && err != io.EOF {
		err = b.stalledErr(err)
	}
	return n, err
}

// stalledErr is err, or an ErrStalled in its place when the timer, not the caller, canceled the request.
func (b *idleBody) stalledErr(err error) error {
	if b.stalled.Load() && b.parent.Err() == nil {
		return fmt.Errorf("GET blob %s: %w: no byte received for %v", b.digest, ErrStalled, b.idle)
	}
	return err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	b.cancel()
	if b.rc != nil {
		return b.rc.Close()
	}
	return nil
}
