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

// TestArgumentErrorsAreUsage: every wrong argument list is a usage error (exit status 2) that says what
// is wrong — an unknown subcommand at any level (cobra answers one of a command without a Run of its
// own with the help and status 0), too many or too few arguments, an argument to a command that takes
// none — and a command with subcommands given none still prints its help.
func TestArgumentErrorsAreUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string // in stderr (code 2) or stdout (code 0)
	}{
		{[]string{"nosuch"}, exitUsage, `unknown command "nosuch" for "orkpipe"`},
		{[]string{"pack", "nosuch"}, exitUsage, `unknown command "nosuch" for "orkpipe pack"`},
		{[]string{"key", "nosuch"}, exitUsage, `unknown command "nosuch" for "orkpipe key"`},
		{[]string{"cache", "nosuch"}, exitUsage, `unknown command "nosuch" for "orkpipe cache"`},
		{[]string{"biuld"}, exitUsage, `unknown command "biuld" for "orkpipe"; did you mean build?`},
		{[]string{"cache", "vrify"}, exitUsage, `did you mean verify?`},
		{[]string{"version", "x"}, exitUsage, `orkpipe version takes no arguments, got ["x"]`},
		{[]string{"cache", "dir", "x"}, exitUsage, `orkpipe cache dir takes no arguments`},
		{[]string{"inspect"}, exitUsage, "accepts 1 arg(s), received 0"},
		{[]string{"push", "a"}, exitUsage, "accepts 2 arg(s), received 1"},
		{[]string{"key", "generate"}, exitUsage, "orkpipe key generate KEYFILE"},
		{[]string{"key", "generate", "a", "b"}, exitUsage, "accepts at most 1 arg(s), received 2"},
		{[]string{"key", "generate", "a", "-o", "b"}, exitUsage, `give KEYFILE once`},
		{[]string{"pack"}, exitOK, "orkpipe pack [command]"},
		{[]string{"key"}, exitOK, "orkpipe key [command]"},
		{[]string{"cache"}, exitOK, "orkpipe cache [command]"},
		{nil, exitOK, "orkpipe [command]"},
	} {
		stdout, stderr, code := orkpipeExit(t, c.args...)
		got := stderr
		if c.code == exitOK {
			got = stdout
		}
		if code != c.code || !strings.Contains(got, c.want) {
			t.Errorf("orkpipe %q: exit %d, stdout %.200q, stderr %q; want exit %d and %q", c.args, code, stdout, stderr, c.code, c.want)
		}
	}
}

// TestKeyGenerateArgument: the key file is given as the argument or with -o, the same files either way.
func TestKeyGenerateArgument(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"key", "generate", dir + "/a.key"}, {"key", "generate", "-o", dir + "/b.key"}} {
		if _, stderr, code := orkpipeExit(t, args...); code != exitOK {
			t.Fatalf("orkpipe %q: exit %d: %s", args, code, stderr)
		}
	}
	for _, name := range []string{"a.key", "a.key.pub", "b.key", "b.key.pub"} {
		st, err := os.Stat(dir + "/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(name, ".pub") && st.Mode().Perm() != 0o600 {
			t.Errorf("private key %s: mode %v, want 0600", name, st.Mode().Perm())
		}
	}
}
