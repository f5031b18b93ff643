// Package progress renders engine events for people and programs: JSON Lines (--json), plain log
// lines (not a terminal) and live multi-line progress bars (a terminal). Choose picks one.
package progress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"

	"orkpipe/internal/units"
	"orkpipe/pipelines/engine"
)

// Sink is an engine.Sink that must be closed after the build (it may own a renderer).
type Sink interface {
	engine.Sink
	Close() error
}

// Choose returns the JSON Lines sink if jsonOut, live bars if w is a terminal, else plain lines, each
// estimating the time left with eta (nil: a new ETA).
func Choose(w io.Writer, jsonOut bool, eta *ETA) Sink {
	switch {
	case jsonOut:
		return NewJSON(w, eta)
	case isTerminal(w):
		return NewBars(w, eta)
	default:
		return NewText(w, eta)
	}
}

// orNew is eta, or a new ETA if nil.
func orNew(eta *ETA) *ETA {
	if eta == nil {
		return NewETA()
	}
	return eta
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// JSON writes one JSON object per event and line (the contract is in docs/cli.md); a node_finished
// line carries the estimate of the time left (ETA) once there is one.
type JSON struct {
	eta   *ETA
	mu    sync.Mutex
	w     *bufio.Writer
	enc   *json.Encoder
	buf   []byte // an event's line (engine.Event.AppendJSON: encoding/json's bytes, no reflection)
	err   error
	flush time.Time // last flush
}

// jsonFlushEvery bounds how long plan and node_cached lines wait in the buffer while more follow.
const jsonFlushEvery = 100 * time.Millisecond

// NewJSON returns a JSON Lines sink writing to w, estimating the time left with eta (nil: a new ETA).
func NewJSON(w io.Writer, eta *ETA) *JSON {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &JSON{eta: orNew(eta), w: bw, enc: enc, flush: time.Now()}
}

// Emit writes e as one line. Plan and node_cached events come in bursts (one per node, before and
// while a build starts; a no-op rebuild is nothing else): their lines are buffered and written
// with the next other event, when the buffer fills, or once the last write is jsonFlushEvery old
// — not one write per line (900 of them on a no-op rebuild of a 27B graph). Every other event is
// written at once.
func (j *JSON) Emit(e engine.Event) {
	j.eta.Emit(e)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return
	}
	if e.Summary != nil {
		j.err = j.enc.Encode(e.Summary)
	} else if j.buf, j.err = e.AppendJSON(j.buf[:0]); j.err == nil {
		if e.Event == engine.EventNodeFinished && len(j.buf) > 0 && j.buf[len(j.buf)-1] == '}' {
			j.buf = append(j.eta.appendJSON(j.buf[:len(j.buf)-1], e.Time), '}')
		}
		j.buf = append(j.buf, '\n')
		_, j.err = j.w.Write(j.buf)
	}
	if j.err == nil && (e.Summary != nil || e.Event != engine.EventPlan && e.Event != engine.EventNodeCached || time.Since(j.flush) >= jsonFlushEvery) {
		j.err = j.w.Flush()
		j.flush = time.Now()
	}
}

// Close writes what is buffered and reports the first write error.
func (j *JSON) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err == nil {
		j.err = j.w.Flush()
	}
	return j.err
}

// Text writes one human-readable line per node outcome and a closing summary; plan events and
// node starts of quick nodes are not shown. A finished node's line ends with the estimate of the
// time left (ETA) once there is one.
type Text struct {
	mu  sync.Mutex
	w   io.Writer
	err error
	eta *ETA
}

// NewText returns a plain-lines sink writing to w, estimating the time left with eta (nil: a new ETA).
func NewText(w io.Writer, eta *ETA) *Text { return &Text{w: w, eta: orNew(eta)} }

// Emit writes e.
func (t *Text) Emit(e engine.Event) {
	t.eta.Emit(e)
	line := TextLine(e)
	if line == "" {
		return
	}
	if e.Event == engine.EventNodeFinished {
		if left := t.eta.String(e.Time); left != "" {
			line += " (" + left + ")"
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		_, t.err = fmt.Fprintln(t.w, line)
	}
}

// Close reports the first write error.
func (t *Text) Close() error { return t.err }

// TextLine formats one event as a log line ("" for events not worth a line).
func TextLine(e engine.Event) string {
	short := func(k string) string {
		if len(k) > len("blake3:")+12 {
			return k[len("blake3:") : len("blake3:")+12]
		}
		return k
	}
	switch e.Event {
	case engine.EventNodeCached:
		if e.SameAs != "" {
			return fmt.Sprintf("cached    %-24s %s (same key as %s)", e.Node, short(e.Key), e.SameAs)
		}
		return fmt.Sprintf("cached    %-24s %s", e.Node, short(e.Key))
	case engine.EventNodeVerifying:
		return fmt.Sprintf("verifying %-24s %s inputs (%s)", e.Node, short(e.Key), units.FormatSize(e.Bytes))
	case engine.EventNodeStarted:
		if e.Checked {
			return fmt.Sprintf("checking  %-24s %s %s", e.Node, short(e.Key), e.Stage)
		}
		return fmt.Sprintf("started   %-24s %s %s", e.Node, short(e.Key), e.Stage)
	case engine.EventNodeFinished:
		if e.Checked {
			return fmt.Sprintf("reproduced %-23s %s in %s", e.Node, short(e.Key), time.Duration(e.DurationMS)*time.Millisecond)
		}
		return fmt.Sprintf("finished  %-24s %s in %s", e.Node, short(e.Key), time.Duration(e.DurationMS)*time.Millisecond)
	case engine.EventNodeFailed:
		if e.Error == "canceled" {
			return fmt.Sprintf("canceled  %-24s %s", e.Node, short(e.Key))
		}
		return fmt.Sprintf("FAILED    %-24s %s: %s", e.Node, short(e.Key), e.Error)
	case engine.EventSummary:
		s := e.Summary
		executed := fmt.Sprint(s.Executed)
		if s.Checked > 0 {
			executed += fmt.Sprintf(" (%d of them cached and reproduced)", s.Checked)
		}
		line := fmt.Sprintf("%s: executed %s, cached %d, failed %d, skipped %d in %s", s.Target, executed, s.Cached, s.Failed, s.Skipped, time.Duration(s.DurationMS)*time.Millisecond)
		for name, out := range s.Outputs {
			line += fmt.Sprintf("\n  %s -> %s", name, out)
		}
		return line
	case engine.EventPlan:
		return ""
	}
	return ""
}
