package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// TestGlobalOptionsWriters: a command's stdout and stderr take writes from several goroutines (the
// progress sink, the logger, os/exec copying orkpipe-dagger's stderr). A buffer given for both is
// behind one lock and keeps every line whole; an *os.File is passed through, so that a child process
// inherits the descriptor and a terminal is still recognized.
func TestGlobalOptionsWriters(t *testing.T) {
	if o := newGlobalOptions(os.Stdout, os.Stderr); o.stdout != os.Stdout || o.stderr != os.Stderr {
		t.Errorf("files wrapped: %T, %T", o.stdout, o.stderr)
	}
	var buf bytes.Buffer
	o := newGlobalOptions(&buf, &buf)
	if _, ok := o.stdout.(*lockedWriter); !ok || o.stdout != o.stderr {
		t.Fatalf("one buffer for both: stdout %T %p, stderr %T %p, want one *lockedWriter", o.stdout, o.stdout, o.stderr, o.stderr)
	}
	const writers, lines = 8, 500
	var wg sync.WaitGroup
	for g := range writers {
		w := o.stdout
		if g%2 == 1 {
			w = o.stderr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lines {
				fmt.Fprintf(w, "writer %d line %d\n", g, i)
			}
		}()
	}
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(got) != writers*lines {
		t.Fatalf("%d lines, want %d", len(got), writers*lines)
	}
	next := make([]int, writers)
	for _, l := range got {
		var g, i int
		if _, err := fmt.Sscanf(l, "writer %d line %d", &g, &i); err != nil || g < 0 || g >= writers || i != next[g] {
			t.Fatalf("line %q out of order or torn (next of writer %d: %d)", l, g, next[min(max(g, 0), writers-1)])
		}
		next[g]++
	}
}
