package progress

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"orkpipe/internal/units"
	"orkpipe/pipelines/engine"
)

// Bars draws live progress on a terminal: one bar for the whole graph (nodes done / total, the time
// elapsed and the estimate of the time left: ETA) and one spinner line per running node, removed when
// it ends. Failures and the summary are printed as lines above the bars.
type Bars struct {
	eta     *ETA
	mu      sync.Mutex
	w       io.Writer
	p       *mpb.Progress
	total   *mpb.Bar
	nodes   int
	running map[string]*mpb.Bar
	done    bool // the renderer has been shut down
}

// NewBars returns a bar renderer on w (a terminal), estimating the time left with eta (nil: a new ETA).
func NewBars(w io.Writer, eta *ETA) *Bars {
	return &Bars{eta: orNew(eta), w: w, p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(40)), running: map[string]*mpb.Bar{}}
}

// Emit updates the bars.
func (b *Bars) Emit(e engine.Event) {
	b.eta.Emit(e)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	switch e.Event {
	case engine.EventPlan:
		b.nodes++
		if b.total == nil {
			b.total = b.p.AddBar(0, mpb.BarPriority(1<<30),
				mpb.PrependDecorators(decor.Name("nodes "), decor.CountersNoUnit("%d/%d")),
				mpb.AppendDecorators(decor.Elapsed(decor.ET_STYLE_GO), decor.Any(b.left)))
		}
		b.total.SetTotal(int64(b.nodes), false)
	case engine.EventNodeVerifying, engine.EventNodeStarted:
		if bar := b.running[e.Node]; bar != nil { // verifying, then started (or verifying again after a retry)
			bar.Abort(true)
		}
		name := fmt.Sprintf("%-24s %s", e.Node, e.Stage)
		if e.Event == engine.EventNodeVerifying {
			name = fmt.Sprintf("%-24s verifying inputs (%s)", e.Node, units.FormatSize(e.Bytes))
		}
		b.running[e.Node] = b.p.AddSpinner(0, mpb.BarRemoveOnComplete(),
			mpb.PrependDecorators(decor.Name(name)),
			mpb.AppendDecorators(decor.Elapsed(decor.ET_STYLE_GO)))
	case engine.EventNodeFinished, engine.EventNodeFailed, engine.EventNodeCached:
		if bar := b.running[e.Node]; bar != nil {
			bar.SetTotal(-1, true)
			delete(b.running, e.Node)
		}
		if e.Event == engine.EventNodeFailed {
			fmt.Fprintln(b.p, TextLine(e))
		}
		if b.total != nil {
			b.total.Increment()
		}
	case engine.EventSummary:
		for id, bar := range b.running {
			bar.Abort(true)
			delete(b.running, id)
		}
		if b.total != nil {
			b.total.SetTotal(-1, true)
		}
		b.p.Wait()
		b.done = true
		fmt.Fprintln(b.w, TextLine(e))
	}
}

// left is the total bar's estimate of the time left, after the elapsed time.
func (b *Bars) left(decor.Statistics) string {
	if s := b.eta.String(time.Now()); s != "" {
		return "  " + s
	}
	return ""
}

// Close stops the renderer if no summary arrived.
func (b *Bars) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	for _, bar := range b.running {
		bar.Abort(true)
	}
	if b.total != nil {
		b.total.Abort(false)
	}
	b.p.Wait()
	b.done = true
	return nil
}
