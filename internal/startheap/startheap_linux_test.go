//go:build linux && (amd64 || arm64)

package startheap

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"orkpipe/internal/testfiles"
)

// helperEnv makes the test binary, re-run by TestAdviceByCommand with an orkpipe-like command line,
// print what its init did instead of running the tests: the init sees that command line in
// /proc/self/cmdline exactly as orkpipe's would.
const helperEnv = "STARTHEAP_TEST_REPORT"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		flag, err := heapFlag()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		mapped, err := imageResident()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Printf("status=%v hg=%v\nimage=%v resident=%v\n", Status(), flag, ImageStatus(), mapped)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// heapFlag reports whether the mapping that holds a heap object carries the huge-page advice ("hg"
// in smaps' VmFlags). The runtime never gives the heap that advice itself.
func heapFlag() (bool, error) {
	obj := new([64]byte)
	if probe != nil {
		obj = probe
	}
	p := uint64(uintptr(unsafe.Pointer(obj)))
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return false, err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := strings.Cut(strings.Fields(line + " ")[0], "-"); ok && !strings.HasSuffix(lo, ":") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && a <= p && p < b
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Contains(line+" ", " hg "), nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, fmt.Errorf("no mapping of %#x in /proc/self/smaps", p)
}

// imageResident reports whether every page of the executable's read-only mappings (text, rodata) is
// in the process's page table: their smaps Rss equals their Size.
func imageResident() (bool, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return false, err
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return false, err
	}
	defer f.Close()
	seen, all := 0, true
	var size string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 6 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			in = fields[5] == exe && !strings.Contains(fields[1], "w")
			if in {
				seen++
			}
		case in && len(fields) >= 2 && fields[0] == "Size:":
			size = fields[1]
		case in && len(fields) >= 2 && fields[0] == "Rss:":
			all = all && fields[1] == size
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	if seen < 2 {
		return false, fmt.Errorf("%d read-only mappings of %s in /proc/self/smaps, want text and rodata", seen, exe)
	}
	return all, nil
}

// TestAdviceByCommand re-runs the test binary with orkpipe command lines: a short command's heap gets
// the advice, a build's, a node's and any command's under GODEBUG=disablethp=1 do not.
func TestAdviceByCommand(t *testing.T) {
	thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	thpOff := err != nil || strings.Contains(string(thp), "[never]")
	for _, c := range []struct {
		args    []string
		godebug string
		advised bool
		status  string // substring of Status() when not advised
	}{
		{args: []string{"hash", "--no-cache", "x"}, advised: true},
		{args: []string{"--cache", "/tmp/c", "-j", "2", "version"}, advised: true},
		{args: []string{"build", "r.yaml", "-o", "out"}, status: `"build" is not a short command`},
		{args: []string{"-j", "2", "node", "exec"}, status: `"node" is not a short command`},
		{args: []string{"hash", "x"}, godebug: "inittrace=0,disablethp=1", status: "GODEBUG=disablethp=1"},
	} {
		name := strings.Join(c.args, " ")
		cmd := testfiles.SelfCommand(c.args...)
		cmd.Env = append(os.Environ(), helperEnv+"=1", "GODEBUG="+c.godebug)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		got, image, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		checkImage(t, name, IsShort(c.args), image)
		switch {
		case c.advised && thpOff:
			if !strings.Contains(got, "hg=false") {
				t.Errorf("%s: THP is off, yet %s", name, got)
			}
		case c.advised:
			if got != "status=<nil> hg=true" {
				t.Errorf("%s: %s, want the advice given (status=<nil> hg=true)", name, got)
			}
		default:
			if !strings.Contains(got, "status=no advice: "+c.status) && !strings.Contains(got, "status="+c.status) || !strings.HasSuffix(got, "hg=false") {
				t.Errorf("%s: %s, want no advice (%s, hg=false)", name, got, c.status)
			}
		}
	}
}

// checkImage checks the helper's image line: a short command's read-only segments all mapped (unless
// the kernel lacks cachestat or MADV_POPULATE_READ, or the test binary is not all in the page cache:
// then the status says so), any other command's left alone.
func checkImage(t *testing.T, name string, short bool, line string) {
	t.Helper()
	switch {
	case !short:
		if !strings.HasPrefix(line, "image=no advice: ") {
			t.Errorf("%s: %s, want the image left to fault in (not a short command)", name, line)
		}
	case line == "image=<nil> resident=true":
	case strings.HasPrefix(line, "image=<nil>"):
		t.Errorf("%s: %s: init says it mapped the image, but smaps shows pages missing", name, line)
	case strings.Contains(line, "function not implemented") || strings.Contains(line, "left to fault in"):
		t.Logf("%s: %s (an older kernel, or the test binary not all in the page cache)", name, line)
	default:
		t.Errorf("%s: %s, want the image mapped", name, line)
	}
}

// TestNoAdviceUnderGoTest: the test binary's own command line (-test.* flags) names no command, so
// its heap has no advice.
func TestNoAdviceUnderGoTest(t *testing.T) {
	if Status() == nil {
		t.Fatalf("Status() = nil under go test (args %q)", os.Args[1:])
	}
	if hg, err := heapFlag(); err != nil || hg {
		t.Fatalf("heap mapping advised under go test: hg=%v, %v", hg, err)
	}
}
