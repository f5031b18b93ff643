package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"orkpipe/pipelines/progress"
	"orkpipe/registry"
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
	clock := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tp.now = func() time.Time { return clock }
	const gib = 1 << 30
	tp.Report(registry.Event{Kind: registry.EventStart, File: "m.orkpack", Total: 100 * gib})
	run := func(secs int, perSec int64) {
		for range secs {
			clock = clock.Add(time.Second)
			if perSec > 0 {
				tp.Report(registry.Event{Kind: registry.EventBytes, File: "m.orkpack", Bytes: perSec})
			}
			tp.tick()
		}
	}
	run(30, gib)   // 30 GiB at 1 GiB/s
	run(300, 0)    // a five-minute stall
	run(60, gib/2) // then half the speed
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
