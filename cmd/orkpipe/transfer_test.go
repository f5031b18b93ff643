package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"orkpipe/registry"
)

// TestTransferPlainLines: plain mode writes a file's start and end, and while it moves, a line
// every plainEvery with its bytes, share, rate and time left — not one per event.
func TestTransferPlainLines(t *testing.T) {
	var out bytes.Buffer
	clock := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tp := newTransferProgress(&globalOptions{stderr: &out}, "pull")
	if !tp.plain {
		t.Fatal("a buffer for stderr: not plain mode")
	}
	tp.now = func() time.Time { return clock }
	const gib = 1 << 30
	tp.Report(registry.Event{Kind: registry.EventStart, File: "m.orkpack", Total: 10 * gib})
	tp.Report(registry.Event{Kind: registry.EventStart, File: "m.orkpack.gguf", Total: 1 << 20})
	for range 29 { // 1 GiB a second for 29 s: no line
		clock = clock.Add(time.Second)
		tp.Report(registry.Event{Kind: registry.EventBytes, File: "m.orkpack", Bytes: gib / 4})
	}
	clock = clock.Add(time.Second)
	tp.Report(registry.Event{Kind: registry.EventBytes, File: "m.orkpack", Bytes: gib / 2})
	tp.Report(registry.Event{Kind: registry.EventBytes, File: "m.orkpack", Bytes: gib / 4}) // the same second: no line
	tp.Report(registry.Event{Kind: registry.EventDone, File: "m.orkpack.gguf", Err: errors.New("digest mismatch")})
	clock = clock.Add(10 * time.Second)
	tp.Report(registry.Event{Kind: registry.EventBytes, File: "m.orkpack", Bytes: gib})
	tp.Report(registry.Event{Kind: registry.EventDone, File: "m.orkpack"})
	tp.Report(registry.Event{Kind: registry.EventSkipped, File: "report.json"})
	want := []string{
		"pull m.orkpack: 10.00 GiB to transfer",
		"pull m.orkpack.gguf: 1.00 MiB to transfer",
		// 7.75 GiB in 30 s: 264.53 MiB/s, 2.25 GiB left in ~9 s.
		"pull m.orkpack: 7.75 GiB of 10.00 GiB (77%), 264.53 MiB/s, ~9s left",
		"pull m.orkpack.gguf: failed",
		"pull m.orkpack: done, verified",
		"pull report.json: already present, verified",
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
