//go:build linux

package build

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"orkpipe/internal/testfiles"
)

// The child side of TestPlanSyscallReads: which plan, where to write its source files, and the
// marker that brackets planning in the trace.
const (
	planChildCase = "ORKPIPE_TEST_PLAN_CASE"
	planChildOut  = "ORKPIPE_TEST_PLAN_OUT"
	planChildMark = "ORKPIPE_TEST_PLAN_MARK"
)

// TestPlanSyscallReads checks Target.PlanKey's contract for every file system call made while a
// plan is made, by any code — this package, ork, stages, the standard library, a dependency —,
// which TestPlanReadsThroughSeams (this package's source only) cannot see: each plan of planCases
// runs in a child process of the test binary under strace, and every path a file system call
// names (open, stat, access, readlink, ... whatever its result: a file's absence is a fact a plan
// can depend on too) between two marker calls around Target.Graph must be a source input of the
// graph planned, whose digests the build memo checks before it serves a build unplanned.
//
// It needs strace (Debian's package; .ci/run installs it) and ptrace, which some containers refuse:
// without either the test is skipped, saying which, and fails in CI.
func TestPlanSyscallReads(t *testing.T) {
	if name := os.Getenv(planChildCase); name != "" {
		planChild(t, name)
		return
	}
	strace, err := exec.LookPath("strace")
	if err != nil {
		testfiles.Need(t, "strace not found (%v): apt-get install strace to trace what planning reads", err)
	}
	// strace needs ptrace, which some containers refuse (seccomp, no CAP_SYS_PTRACE): try it once.
	if b, err := exec.Command(strace, "-f", "-qq", "-o", os.DevNull, os.Args[0], "-test.run=^$").CombinedOutput(); err != nil {
		testfiles.Need(t, "strace cannot trace here (%v: %s): this test needs ptrace", err, bytes.TrimSpace(b))
	}
	for i, tc := range planCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			trace, out := filepath.Join(dir, "trace"), filepath.Join(dir, "sources.json")
			mark := fmt.Sprintf("/orkpipe-plan-mark-%d-%d", os.Getpid(), i)
			cmd := exec.Command(strace, "-f", "-qq", "-e", "trace=%file", "-e", "signal=none", "-s", "65535",
				"-o", trace, os.Args[0], "-test.run=^TestPlanSyscallReads$", "-test.count=1")
			cmd.Env = append(os.Environ(), planChildCase+"="+tc.name, planChildOut+"="+out, planChildMark+"="+mark)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", cmd, err, b)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("the child wrote no source list: %v", err)
			}
			var sources []string
			if err := json.Unmarshal(b, &sources); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			calls, err := tracedCalls(trace, mark)
			if err != nil {
				t.Fatal(err)
			}
			if len(calls) == 0 {
				t.Fatalf("%s: no file system call between the markers: the trace is not of planning", trace)
			}
			abs := func(p string) string {
				a, err := filepath.Abs(p)
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			for i := range sources {
				sources[i] = abs(sources[i])
			}
			for _, c := range calls {
				if !filepath.IsAbs(c.path) && c.dirfd != "" && c.dirfd != "AT_FDCWD" {
					t.Errorf("planning called %s on %q relative to fd %s: not a path this test can check", c.syscall, c.path, c.dirfd)
					continue
				}
				if !slices.Contains(sources, abs(c.path)) {
					t.Errorf("planning called %s on %s, which is not a source input of the graph (sources: %v)", c.syscall, c.path, sources)
				}
			}
		})
	}
}

// planChild makes the plan named and writes the graph's source files to planChildOut as JSON,
// with a stat of the marker path before and after planning (the parent's strace sees both).
func planChild(t *testing.T, name string) {
	cases := planCases(t)
	i := slices.IndexFunc(cases, func(c planCase) bool { return c.name == name })
	if i < 0 {
		t.Fatalf("%s=%q: no such plan", planChildCase, name)
	}
	tg := cases[i].target(t)
	mark := os.Getenv(planChildMark)
	os.Stat(mark + "-begin")
	g, err := tg.Graph(context.Background())
	os.Stat(mark + "-end")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(g.SourceFiles())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv(planChildOut), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tracedCall is one file system call in an strace log: the call, its directory fd argument (for
// the *at calls) and the path it names.
type tracedCall struct {
	syscall, dirfd, path string
}

// straceLine is a call as strace -f writes it: "PID name(args" (the rest of the line, or
// "<unfinished ...>" when another thread's call came between; the resumed half names no path).
var straceLine = regexp.MustCompile(`^\d+\s+([a-z0-9_]+)\((.*)$`)

// tracedCalls returns the calls of the strace log at path between the stats of mark-begin and
// mark-end, each with the first path (quoted string) among its arguments.
func tracedCalls(path, mark string) ([]tracedCall, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var calls []tracedCall
	state := 0 // 0 before the begin marker, 1 between, 2 after the end marker
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := straceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name, args := m[1], m[2]
		q := strings.IndexByte(args, '"')
		if q < 0 {
			continue
		}
		p, err := strconv.QuotedPrefix(args[q:])
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		if p, err = strconv.Unquote(p); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		switch {
		case p == mark+"-begin":
			state = 1
			continue
		case p == mark+"-end":
			state = 2
			continue
		}
		if state != 1 {
			continue
		}
		c := tracedCall{syscall: name, path: p}
		if strings.HasSuffix(name, "at") || strings.HasSuffix(name, "at2") || name == "statx" {
			c.dirfd = strings.TrimSpace(args[:q])
			c.dirfd = strings.TrimSuffix(c.dirfd, ",")
		}
		calls = append(calls, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if state != 2 {
		return nil, fmt.Errorf("%s: the markers %s-begin and -end are not both in the trace (state %d)", path, mark, state)
	}
	return calls, nil
}
