package main

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"orkpipe/pipelines/progress"
	"orkpipe/registry"

	"github.com/vbauerster/mpb/v8"
)

// TestTransferPlainLines: plain mode writes a file's start and end, and, every plainEvery while it
// is under way, its bytes, share, rate and time left, or that nothing moved; not a line per event.
func TestTransferPlainLines(t *testing.T) {
	var out bytes.Buffer
	tp := newTransferProgress(&globalOptions{stderr: &out}, "pull")
	if !tp.plain {
		t.Fatal("a buffer for stderr: not plain mode")
	}
	tp.wait() // the test ticks by hand, on its own clock
	clock := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tp.now = func() time.Time { return clock }
	step := func(d time.Duration, e ...registry.Event) {
		clock = clock.Add(d)
		for _, e := range e {
			tp.Report(e)
		}
		tp.tick()
	}
	const gib = 1 << 30
	bytesOf := func(n int64) registry.Event {
		return registry.Event{Kind: registry.EventBytes, File: "m.orkpack", Bytes: n}
	}
	step(0, registry.Event{Kind: registry.EventStart, File: "m.orkpack", Total: 10 * gib},
		registry.Event{Kind: registry.EventStart, File: "m.orkpack.gguf", Total: 1 << 20})
	for range 29 { // a quarter GiB a second for 29 s: no line
		step(time.Second, bytesOf(gib/4))
	}
	step(time.Second, bytesOf(gib/2)) // 30 s: both files' lines
	step(0, bytesOf(gib/4))           // the same second: none
	step(0, registry.Event{Kind: registry.EventDone, File: "m.orkpack.gguf", Err: errors.New("digest mismatch")})
	step(30 * time.Second) // 60 s: 8 GiB moved
	step(30 * time.Second) // 90 s: nothing moved since
	step(29 * time.Second) // not yet
	step(time.Second)      // 120 s
	step(time.Second, bytesOf(2*gib), registry.Event{Kind: registry.EventDone, File: "m.orkpack"},
		registry.Event{Kind: registry.EventSkipped, File: "report.json"})
	step(30 * time.Second) // nothing under way: no line
	want := []string{
		"pull m.orkpack: 10.00 GiB to transfer",
		"pull m.orkpack.gguf: 1.00 MiB to transfer",
		// 7.75 GiB in 30 s: 264.53 MiB/s, 2.25 GiB left in ~9 s.
		"pull m.orkpack: 7.75 GiB of 10.00 GiB (77%), 264.53 MiB/s, ~9s left",
		"pull m.orkpack.gguf: 0 B of 1.00 MiB (0%), nothing moved in the last 30s",
		"pull m.orkpack.gguf: failed",
		"pull m.orkpack: 8.00 GiB of 10.00 GiB (80%), 136.53 MiB/s, ~15s left",
		"pull m.orkpack: 8.00 GiB of 10.00 GiB (80%), nothing moved in the last 30s",
		"pull m.orkpack: 8.00 GiB of 10.00 GiB (80%), nothing moved in the last 1m0s",
		"pull m.orkpack: done, verified",
		"pull report.json: already present, verified",
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestTransferTicker: plain mode's own ticker writes the lines, and wait stops it.
func TestTransferTicker(t *testing.T) {
	var buf bytes.Buffer
	out := &lockedWriter{w: &buf}
	read := func() string { out.mu.Lock(); defer out.mu.Unlock(); return buf.String() }
	tp := newTransferProgress(&globalOptions{stderr: out}, "push")
	start := time.Now()
	tp.mu.Lock()
	tp.now = func() time.Time { return start.Add(10 * time.Since(start) * time.Duration(plainEvery/time.Second)) }
	tp.mu.Unlock()
	tp.Report(registry.Event{Kind: registry.EventStart, File: "f", Total: 100})
	tp.Report(registry.Event{Kind: registry.EventBytes, File: "f", Bytes: 40})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(read(), "push f: 40 B of 100 B (40%)") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	tp.wait()
	n := len(read())
	time.Sleep(1500 * time.Millisecond)
	if !strings.Contains(read(), "push f: 40 B of 100 B (40%)") || len(read()) != n {
		t.Errorf("ticker's lines %q (%d bytes at wait, %d after)", read(), n, len(read()))
	}
}

// TestTransferRateAfterStall: the plain lines' rate and time left follow the recent rate, not the
// mean since the start: after a five-minute stall the transfer resumes at half its speed, and the
// lines say so at once (the mean since the start would say 128 MiB/s and ~7m20s left, then 157.54
// MiB/s and ~4m20s).
func TestTransferRateAfterStall(t *testing.T) {
	var out bytes.Buffer
	tp := newTransferProgress(&globalOptions{stderr: &out}, "push")
	tp.wait()
	stallTransfer(tp)
	want := []string{
		"push m.orkpack: 100.00 GiB to transfer",
		"push m.orkpack: 30.00 GiB of 100.00 GiB (30%), 1.00 GiB/s, ~1m10s left",
	}
	for m := 1; m <= 10; m++ {
		want = append(want, fmt.Sprintf("push m.orkpack: 30.00 GiB of 100.00 GiB (30%%), nothing moved in the last %s", progress.RoundLeft(time.Duration(m)*30*time.Second)))
	}
	want = append(want,
		"push m.orkpack: 45.00 GiB of 100.00 GiB (45%), 768.00 MiB/s, ~1m13s left",
		"push m.orkpack: 60.00 GiB of 100.00 GiB (60%), 640.00 MiB/s, ~1m4s left")
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestTransferBarsRecentRate: on a terminal the bars' rate is recent too: the same transfer as
// TestTransferRateAfterStall (1 GiB/s for 30 s, a five-minute stall, then 512 MiB/s for a minute)
// ends drawn at 373.9 MiB/s, where the mean since the start would draw 157.5 MiB/s. (mpb's EWMA
// averages the time per byte and charges a stall to the next tick that moves bytes, so the minute
// after a stall still reads below the rate: `373.9 MiB/s 2m8s` for the 40 GiB left, where 1m20s is
// true, and 4m20s by the mean.) A file done within a second is drawn at its own rate.
func TestTransferBarsRecentRate(t *testing.T) {
	var buf bytes.Buffer
	out := &lockedWriter{w: &buf}
	refresh := make(chan any)
	tp := &transferProgress{verb: "push", w: out, bars: map[string]*mpb.Bar{}, files: map[string]*plainFile{},
		p: mpb.New(mpb.WithOutput(out), mpb.WithWidth(160), mpb.WithManualRefresh(refresh))} // not a terminal: the line's width
	stallTransfer(tp)
	// A file done within a second (no tick) is drawn at its own rate: 1 MiB in half a second.
	t0 := tp.now()
	tp.Report(registry.Event{Kind: registry.EventStart, File: "small", Total: 1 << 20})
	tp.now = func() time.Time { return t0.Add(500 * time.Millisecond) }
	tp.Report(registry.Event{Kind: registry.EventBytes, File: "small", Bytes: 1 << 20})
	tp.Report(registry.Event{Kind: registry.EventDone, File: "small"})
	tp.wait() // the bars are drawn once more as they stop
	out.mu.Lock()
	frames := buf.String()
	out.mu.Unlock()
	if !regexp.MustCompile(`small .* 2\.0 MiB/s`).MatchString(frames) {
		t.Errorf("a file done within a second: not drawn at 2.0 MiB/s:\n%s", frames)
	}
	m := regexp.MustCompile(`m\.orkpack .* ([0-9.]+) MiB/s`).FindAllStringSubmatch(frames, -1)
	if len(m) == 0 {
		t.Fatalf("no rate in the bars' output %q", frames)
	}
	rate, err := strconv.ParseFloat(m[len(m)-1][1], 64)
	if err != nil || rate < 350 || rate > 512 {
		t.Errorf("the bar's last rate %q MiB/s, want 350-512 (the recent rate, 512, after a stall), not the mean's 157.5", m[len(m)-1][1])
	}
}

// stallTransfer runs tp on its own clock through a 100 GiB transfer: 1 GiB/s for 30 s, a
// five-minute stall, then 512 MiB/s for a minute, a tick a second.
func stallTransfer(tp *transferProgress) {
	clock := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tp.now = func() time.Time { return clock }
	const gib = 1 << 30
	tp.Report(registry.Event{Kind: registry.EventStart, File: "m.orkpack", Total: 100 * gib})
	for _, phase := range []struct {
		secs   int
		perSec int64
	}{{30, gib}, {300, 0}, {60, gib / 2}} {
		for range phase.secs {
			clock = clock.Add(time.Second)
			tp.Report(registry.Event{Kind: registry.EventBytes, File: "m.orkpack", Bytes: phase.perSec})
			tp.tick()
		}
	}
}
