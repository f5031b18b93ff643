package boardhost

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

func (c *collector) machine() Machine {
	m := Machine{
		Hostname:        c.readOr("proc/sys/kernel/hostname"),
		MachineIDDigest: Unreadable,
		CPUModel:        Unreadable,
		Arch:            c.readOr("proc/sys/kernel/arch"),
	}
	if id, ok := c.read("etc/machine-id"); ok {
		m.MachineIDDigest = sumBytes([]byte(id))
	}
	if info, ok := c.read("proc/cpuinfo"); ok {
		m.CPUModel, m.CPUs = cpuModel(info, c.deviceTreeModel())
	}
	if info, ok := c.read("proc/meminfo"); ok {
		m.MemTotalKB = memTotalKB(info)
		if m.MemTotalKB == 0 {
			c.probes = append(c.probes, Probe{Path: "/proc/meminfo", Error: "no \"MemTotal: N kB\" line"})
		}
	}
	return m
}

// deviceTreeModel returns the board's device-tree model ("" when there is none, as on x86).
func (c *collector) deviceTreeModel() string {
	for _, p := range []string{"proc/device-tree/model", "sys/firmware/devicetree/base/model"} {
		if b, err := os.ReadFile(c.path(p)); err == nil {
			return strings.TrimSpace(strings.TrimRight(string(b), "\x00"))
		}
	}
	return ""
}

// cpuModel derives a CPU description and count from /proc/cpuinfo: x86 has "model name";
// arm64 has only "CPU implementer"/"CPU part" per core, so the device-tree model and the
// distinct parts (e.g. 0xd05 Cortex-A55, 0xd0b Cortex-A76 on RK3588) describe it instead.
func cpuModel(info, dtModel string) (string, int) {
	var model string
	n := 0
	parts := map[string]bool{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			n++
		case "model name":
			if model == "" {
				model = v
			}
		case "CPU part":
			parts[v] = true
		}
	}
	if model != "" {
		return model, n
	}
	var ps []string
	for p := range parts {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	desc := dtModel
	if len(ps) > 0 {
		if desc != "" {
			desc += "; "
		}
		desc += "CPU parts " + strings.Join(ps, ",")
	}
	if desc == "" {
		desc = Unreadable
	}
	return desc, n
}

func memTotalKB(info string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			var v int64
			if len(f) == 2 && f[1] == "kB" && sscanInt(f[0], &v) == nil {
				return v
			}
		}
	}
	return 0
}

func sscanInt(s string, v *int64) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not an integer: %q", s)
	}
	*v = n
	return nil
}
