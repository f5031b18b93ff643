package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"orkpipe/internal/units"
	"orkpipe/pipelines/progress"
	"orkpipe/registry"
)

// transferProgress renders registry progress events: bars on a terminal (each file's bytes, rate
// and time left), plain lines otherwise (each file's start and end, and every plainEvery while it
// moves, its bytes, rate and time left: a pull of tens of GiB into a log is not silent for an hour),
// nothing with --json.
type transferProgress struct {
	mu    sync.Mutex
	verb  string
	w     io.Writer
	p     *mpb.Progress
	bars  map[string]*mpb.Bar
	plain bool
	quiet bool
	now   func() time.Time
	files map[string]*plainFile // plain mode: the files moving
}

// plainFile is a file's transfer in plain mode: its bytes to move and moved, when it started and
// when its last line was written.
type plainFile struct {
	total, done int64
	start, last time.Time
}

// plainEvery is how often plain mode writes a moving file's line.
const plainEvery = 30 * time.Second

func newTransferProgress(opts *globalOptions, verb string) *transferProgress {
	tp := &transferProgress{verb: verb, w: opts.stderr, bars: map[string]*mpb.Bar{}, quiet: opts.json, now: time.Now, files: map[string]*plainFile{}}
	if f, ok := opts.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) && !opts.json {
		tp.p = mpb.New(mpb.WithOutput(opts.stderr), mpb.WithWidth(40))
	} else {
		tp.plain = true
	}
	return tp
}

// Report implements registry.Progress.
func (tp *transferProgress) Report(e registry.Event) {
	if tp.quiet {
		return
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.plain {
		tp.line(e)
		return
	}
	switch e.Kind {
	case registry.EventStart:
		tp.bars[e.File] = tp.p.AddBar(e.Total,
			mpb.PrependDecorators(decor.Name(e.File, decor.WC{W: 28, C: decor.DindentRight})),
			mpb.AppendDecorators(decor.CountersKibiByte("% .1f / % .1f"), decor.Name(" "), decor.AverageSpeed(decor.SizeB1024(0), "% .1f"),
				decor.Name(" "), decor.AverageETA(decor.ET_STYLE_GO)))
	case registry.EventBytes:
		if b := tp.bars[e.File]; b != nil {
			b.IncrInt64(e.Bytes)
		}
	case registry.EventDone:
		if b := tp.bars[e.File]; b != nil {
			if e.Err != nil {
				b.Abort(false)
			} else {
				b.SetTotal(b.Current(), true)
			}
		}
	}
}

// line writes e's plain line, if it has one: "pull F: 12.0 GiB to transfer", then every plainEvery
// "pull F: 3.2 GiB of 12.0 GiB (27%), 45.1 MiB/s, ~3m24s left", and "pull F: done, verified".
func (tp *transferProgress) line(e registry.Event) {
	switch e.Kind {
	case registry.EventStart:
		now := tp.now()
		tp.files[e.File] = &plainFile{total: e.Total, start: now, last: now}
		fmt.Fprintf(tp.w, "%s %s: %s to transfer\n", tp.verb, e.File, units.FormatSize(e.Total))
	case registry.EventBytes:
		f := tp.files[e.File]
		if f == nil {
			return
		}
		f.done += e.Bytes
		now := tp.now()
		if now.Sub(f.last) < plainEvery {
			return
		}
		f.last = now
		line := fmt.Sprintf("%s %s: %s of %s", tp.verb, e.File, units.FormatSize(f.done), units.FormatSize(f.total))
		if f.total > 0 {
			line += fmt.Sprintf(" (%d%%)", min(100, f.done*100/f.total))
		}
		if secs := now.Sub(f.start).Seconds(); secs > 0 && f.done > 0 {
			rate := float64(f.done) / secs
			line += fmt.Sprintf(", %s/s", units.FormatSize(int64(rate)))
			if left := f.total - f.done; left > 0 {
				line += ", ~" + progress.RoundLeft(time.Duration(float64(left)/rate*float64(time.Second))) + " left"
			}
		}
		fmt.Fprintln(tp.w, line)
	case registry.EventSkipped:
		fmt.Fprintf(tp.w, "%s %s: already present, verified\n", tp.verb, e.File)
	case registry.EventDone:
		delete(tp.files, e.File)
		if e.Err != nil {
			fmt.Fprintf(tp.w, "%s %s: failed\n", tp.verb, e.File)
		} else {
			fmt.Fprintf(tp.w, "%s %s: done, verified\n", tp.verb, e.File)
		}
	}
}

// wait flushes the bars; call it once the transfer returned.
func (tp *transferProgress) wait() {
	if tp.p == nil {
		return
	}
	tp.mu.Lock()
	for _, b := range tp.bars {
		if !b.Completed() {
			b.Abort(false)
		}
	}
	tp.mu.Unlock()
	tp.p.Wait()
}
