package testfiles

import (
	"runtime"
	"testing"
)

func TestStatusField(t *testing.T) {
	const status = "Name:\ttest\nVmPeak:\t  2048 kB\nVmHWM:\t    1234 kB\nVmRSS:\t  999 kB\nThreads:\t4\nMemAvailable:   5000 kB\n"
	for key, want := range map[string]int64{"VmHWM": 1234, "VmRSS": 999, "VmPeak": 2048, "Threads": 4, "MemAvailable": 5000} {
		if got, err := StatusField(status, key); err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", key, got, err, want)
		}
	}
	if _, err := StatusField(status, "VmSwap"); err == nil {
		t.Error("a missing field gave no error")
	}
	if _, err := StatusField(status, "Name"); err == nil {
		t.Error("a field that is no number gave no error")
	}
	if runtime.GOOS == "linux" {
		if hwm, err := StatusKB("VmHWM"); err != nil || hwm <= 0 {
			t.Errorf("this process's VmHWM: %d, %v", hwm, err)
		}
	}
}
