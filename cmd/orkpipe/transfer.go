package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"orkpipe/internal/units"
	"orkpipe/pipelines/progress"
	"orkpipe/registry"
)

// transferProgress renders registry progress events: bars on a terminal (each file's bytes, and its
// rate and time left over about the last barAge seconds), plain lines otherwise (each file's start and end, and every plainEvery while it is
// under way, its bytes, rate and time left, or that nothing moved: a pull of tens of GiB into a log
// is not silent for an hour, nor a stalled one), nothing with --json.
type transferProgress struct {
	mu    sync.Mutex
	verb  string
	w     io.Writer
	p     *mpb.Progress
	bars  map[string]*mpb.Bar
	plain bool
	quiet bool
	now   func() time.Time
	files map[string]*plainFile // the files under way
	stop  chan struct{}         // stops the ticker (wait); nil with --json
	done  chan struct{}         // closed when the ticker has stopped
}

// plainFile is a file's transfer: its bytes to move and moved, when it started, when its last line
// was written (its bar last moved) and what had moved then, since when its lines have seen nothing
// move, and its lines' recent rate.
type plainFile struct {
	total, done int64
	start, last time.Time
	doneAtLast  int64
	still       time.Time
	// rate is the bytes a second its lines report: the first line's interval's, then each line's
	// interval's rate averaged with the rate before, halving an interval's weight at each line, so
	// that after a stall or a change of speed the rate and time left follow within a few lines; an
	// interval in which nothing moved is not averaged in (its line says so instead).
	rate float64
}

// plainEvery is how often plain mode writes the line of a file under way.
const plainEvery = 30 * time.Second

// barAge is the bars' rate and time left's EWMA age, in ticks (a tick a second).
const barAge = 30

// newTransferProgress returns the progress of a transfer to report on opts.stderr; call wait once
// the transfer returned.
func newTransferProgress(opts *globalOptions, verb string) *transferProgress {
	tp := &transferProgress{verb: verb, w: opts.stderr, bars: map[string]*mpb.Bar{}, quiet: opts.json, now: time.Now, files: map[string]*plainFile{}}
	switch f, ok := opts.stderr.(*os.File); {
	case opts.json:
	case ok && term.IsTerminal(int(f.Fd())):
		tp.p = mpb.New(mpb.WithOutput(opts.stderr), mpb.WithWidth(40))
		tp.stop, tp.done = make(chan struct{}), make(chan struct{})
		go tp.ticker(time.Second)
	default:
		tp.plain = true
		tp.stop, tp.done = make(chan struct{}), make(chan struct{})
		go tp.ticker(time.Second)
	}
	return tp
}

// ticker calls tick every period until stop is closed.
func (tp *transferProgress) ticker(period time.Duration) {
	defer close(tp.done)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-tp.stop:
			return
		case <-t.C:
			tp.tick()
		}
	}
}

// tick writes the line of every file under way whose last line is plainEvery old, in name order:
// "pull F: 3.20 GiB of 12.00 GiB (26%), 45.10 MiB/s, ~3m24s left" (the recent rate, plainFile.rate),
// or, when nothing moved since its last line, "pull F: 3.20 GiB of 12.00 GiB (26%), nothing moved in
// the last 1m0s" (since the last line that saw bytes move, or the start).
func (tp *transferProgress) tick() {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	now := tp.now()
	if !tp.plain {
		// The bars move once a tick, by what moved since the last, which their rate and time left
		// average over about 30 ticks (mpb's EWMA decorators): recent, not the mean since the start.
		for name, f := range tp.files {
			if b := tp.bars[name]; b != nil && now.After(f.last) {
				b.EwmaSetCurrent(f.done, now.Sub(f.last))
				f.last = now
			}
		}
		return
	}
	names := make([]string, 0, len(tp.files))
	for name := range tp.files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := tp.files[name]
		if now.Sub(f.last) < plainEvery {
			continue
		}
		line := fmt.Sprintf("%s %s: %s of %s", tp.verb, name, units.FormatSize(f.done), units.FormatSize(f.total))
		if f.total > 0 {
			line += fmt.Sprintf(" (%d%%)", min(100, f.done*100/f.total))
		}
		switch secs := now.Sub(f.last).Seconds(); {
		case f.done == f.doneAtLast:
			line += ", nothing moved in the last " + progress.RoundLeft(now.Sub(f.still))
		case secs > 0:
			r := float64(f.done-f.doneAtLast) / secs
			if f.rate > 0 {
				r = (f.rate + r) / 2
			}
			f.rate = r
			line += fmt.Sprintf(", %s/s", units.FormatSize(int64(r)))
			if left := f.total - f.done; left > 0 {
				line += ", " + progress.About(time.Duration(float64(left)/r*float64(time.Second))) + " left"
			}
		}
		fmt.Fprintln(tp.w, line)
		if f.done != f.doneAtLast {
			f.still = now
		}
		f.last, f.doneAtLast = now, f.done
	}
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
		now := tp.now()
		tp.files[e.File] = &plainFile{total: e.Total, start: now, last: now, still: now}
		tp.bars[e.File] = tp.p.AddBar(e.Total,
			mpb.PrependDecorators(decor.Name(e.File, decor.WC{W: 28, C: decor.DindentRight})),
			mpb.AppendDecorators(decor.CountersKibiByte("% .1f / % .1f"), decor.Name(" "), decor.EwmaSpeed(decor.SizeB1024(0), "% .1f", barAge),
				decor.Name(" "), decor.EwmaETA(decor.ET_STYLE_GO, barAge)))
	case registry.EventBytes:
		if f := tp.files[e.File]; f != nil {
			f.done += e.Bytes
		}
	case registry.EventDone:
		b, f := tp.bars[e.File], tp.files[e.File]
		delete(tp.files, e.File)
		if b == nil || f == nil {
			return
		}
		if e.Err != nil {
			b.Abort(false)
			return
		}
		if now := tp.now(); now.After(f.last) { // the bytes since the last tick: a file done within a second gets its rate
			b.EwmaSetCurrent(f.done, now.Sub(f.last))
		}
		b.SetTotal(f.done, true)
	}
}

// line writes e's plain line, if it has one ("pull F: 12.0 GiB to transfer", "pull F: done,
// verified"), and counts its bytes for tick.
func (tp *transferProgress) line(e registry.Event) {
	switch e.Kind {
	case registry.EventStart:
		now := tp.now()
		tp.files[e.File] = &plainFile{total: e.Total, start: now, last: now, still: now}
		fmt.Fprintf(tp.w, "%s %s: %s to transfer\n", tp.verb, e.File, units.FormatSize(e.Total))
	case registry.EventBytes:
		if f := tp.files[e.File]; f != nil {
			f.done += e.Bytes
		}
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

// wait stops the ticker and flushes the bars; call it once the transfer returned.
func (tp *transferProgress) wait() {
	if tp.stop != nil {
		close(tp.stop)
		<-tp.done
		tp.stop = nil
	}
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
