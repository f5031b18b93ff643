package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
)

// TestSecondInterruptExits: the first SIGINT cancels the command's context; a command blocked where the
// context cannot reach it (tokenize reading a pipe no one writes) exits at the second, with status 130
// and a line saying it did not clean up. Before, every further ^C was swallowed.
func TestSecondInterruptExits(t *testing.T) {
	raw, err := json.Marshal([]string{"tokenize", testfiles.Path(t, "stories260K.gguf"), "-"})
	if err != nil {
		t.Fatal(err)
	}
	cmd := testfiles.SelfCommand("-test.run=^$")
	cmd.Env = append(os.Environ(), cliChildEnv+"="+string(raw))
	stdin, err := cmd.StdinPipe() // held open and never written
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	waitReadingPipe(t, cmd.Process.Pid, exited)
	for i := 0; i < 2; i++ {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			select {
			case err := <-exited:
				t.Fatalf("exited at the first interrupt (%v), blocked reading its input: %s", err, stderr.String())
			case <-time.After(300 * time.Millisecond): // and two signals this far apart are not merged into one
			}
		}
	}
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		t.Fatal("still running a minute after the second interrupt")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted || !strings.Contains(stderr.String(), "interrupt again: exiting now, without cleaning up") {
		t.Fatalf("after two interrupts: %v, stderr %q; want exit status %d saying it exits now", err, stderr.String(), exitInterrupted)
	}
}

// waitReadingPipe waits until a thread of process pid sleeps in a pipe read (Linux's wchan), or, where
// /proc has no such file, a second.
func waitReadingPipe(t *testing.T, pid int, exited <-chan error) {
	t.Helper()
	tasks := filepath.Join("/proc", strconv.Itoa(pid), "task")
	if _, err := os.Stat(tasks); err != nil {
		time.Sleep(time.Second)
		return
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("exited before reading its input: %v", err)
		default:
		}
		wchans, _ := filepath.Glob(filepath.Join(tasks, "*", "wchan"))
		for _, w := range wchans {
			b, err := os.ReadFile(w)
			if err == nil && (strings.Contains(string(b), "pipe_read") || strings.Contains(string(b), "pipe_wait")) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the child never blocked reading its standard input")
}

// TestNamedPipeRefused: inspect, stub verify, pack verify, rank and the GGUF and orkpack readers refuse a
// named pipe before opening it
// (the open would block until a writer came, and a build's one SIGTERM could not end it).
func TestNamedPipeRefused(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "m.gguf")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"inspect", fifo}, {"stub", "verify", fifo, "--own", "x"}, {"eval", "--model", fifo, "--text", "-"},
		{"pack", "verify", fifo}, {"rank", fifo}} {
		type result struct {
			out string
			err error
		}
		done := make(chan result, 1)
		go func() {
			out, err := runCLI(t, args...)
			done <- result{out, err}
		}()
		select {
		case r := <-done:
			if msg := r.out + fmt.Sprint(r.err); r.err == nil || !strings.Contains(msg, fifo+": not a regular file") && !strings.Contains(msg, "pack "+fifo+": corrupt: not a regular file") {
				t.Errorf("%q: %v (output %q), want an error naming the file as not a regular file", args, r.err, r.out)
			}
		case <-time.After(30 * time.Second):
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil { // lets the blocked open return
				w.Close()
			}
			t.Fatalf("%q: blocked on the named pipe", args)
		}
	}
}
