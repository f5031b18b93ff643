//go:build linux && (amd64 || arm64)

package startheap

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestHeapAdvised: the test binary ran the init too, so the mapping that holds probe carries the
// huge-page flag ("hg" in smaps' VmFlags) unless the host turned THP off.
func TestHeapAdvised(t *testing.T) {
	if mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("transparent huge pages unavailable or off (%q, %v)", mode, err)
	}
	if err := Status(); err != nil {
		t.Fatalf("Status() = %v", err)
	}
	p := uint64(uintptr(unsafe.Pointer(probe)))
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
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
			if !strings.Contains(line+" ", " hg ") {
				t.Fatalf("the heap mapping of %#x has no hg flag: %s", p, line)
			}
			return
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("no mapping of %#x in /proc/self/smaps", p)
}

func TestHasSetting(t *testing.T) {
	for _, c := range []struct {
		list string
		want bool
	}{
		{"", false},
		{"disablethp=1", true},
		{"inittrace=1,disablethp=1", true},
		{"disablethp=1,inittrace=1", true},
		{"disablethp=0", false},
		{"disablethp=1,disablethp=0", false},
		{"disablethp=10", false},
		{"xdisablethp=1", false},
	} {
		if got := hasSetting(c.list, "disablethp=1"); got != c.want {
			t.Errorf("hasSetting(%q) = %v, want %v", c.list, got, c.want)
		}
	}
}
