package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// Machine is what the figures came from.
type Machine struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	RAM       int64  `json:"ram_bytes"`
	Go        string `json:"go"`
	Kernel    string `json:"kernel"`
	LoadStart string `json:"load_start"`
	LoadEnd   string `json:"load_end"`
}

func machineFacts() (Machine, error) {
	m := Machine{Cores: runtime.NumCPU(), LoadStart: loadAverage()}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return m, fmt.Errorf("machine facts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			m.CPU = strings.TrimSpace(v)
			break
		}
	}
	mi, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return m, fmt.Errorf("machine facts: %w", err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return m, fmt.Errorf("machine facts: /proc/meminfo MemTotal %q: %w", f[1], err)
			}
			m.RAM = kb * 1024
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return m, fmt.Errorf("machine facts: go env GOVERSION: %w", err)
	}
	m.Go = strings.TrimSpace(string(out))
	return m, nil
}

// loadAverage returns the 1, 5 and 15 minute load averages as /proc/loadavg shows them.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
