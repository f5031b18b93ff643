package boardhost

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Mismatch is one part in which two reports differ.
type Mismatch struct {
	Part string `json:"part"` // e.g. "machine.hostname", "kernel.version", "module rknpu", "env ORK_OFF", "program", "text"
	A    string `json:"a"`
	B    string `json:"b"`
}

func (m Mismatch) String() string { return fmt.Sprintf("%s: %q vs %q", m.Part, m.A, m.B) }

// Metric is one score in both reports. RelDiff is (B-A)/A, absent when A is 0 or the ratio is beyond float64 (A subnormal).
type Metric struct {
	Name    string   `json:"name"`
	A       float64  `json:"a"`
	B       float64  `json:"b"`
	RelDiff *float64 `json:"rel_diff,omitempty"`
}

// Comparison is the outcome of [Compare].
type Comparison struct {
	Comparable  bool       `json:"comparable"`
	Mismatches  []Mismatch `json:"mismatches,omitempty"`
	Fingerprint [2]string  `json:"fingerprint"` // digests of A and B
	Program     [2]string  `json:"program"`
	Text        [2]string  `json:"text"`
	Metrics     []Metric   `json:"metrics,omitempty"`
}

// Compare compares the scores of two verified reports. They are comparable when the fingerprint
// digests, the run program digests, the text digests, the run command templates (before {pack},
// {stub} and {text} are expanded), the number of chunks and the source of the perplexity all
// match. When they are not, Compare returns the comparison (with every mismatch and
// no metrics) and an error wrapping ErrNotComparable, unless crossMachine is set: then the metrics
// are filled and Comparable stays false. A report that failed verification or has no scores is
// an error (wrapping ErrReport) either way: its numbers mean nothing.
func Compare(a, b *Report, crossMachine bool) (*Comparison, error) {
	for _, x := range []struct {
		label string
		r     *Report
	}{{"A", a}, {"B", b}} {
		switch {
		case !x.r.OK():
			return nil, fmt.Errorf("%w: report %s did not pass verification (failed: %s)", ErrReport, x.label, strings.Join(x.r.Failed(), ", "))
		case x.r.Fingerprint == nil:
			return nil, fmt.Errorf("%w: report %s has no fingerprint", ErrReport, x.label)
		case x.r.Run == nil || x.r.Run.Scores == nil:
			return nil, fmt.Errorf("%w: report %s has no run with scores", ErrReport, x.label)
		}
	}
	c := &Comparison{
		Fingerprint: [2]string{a.Fingerprint.Digest(), b.Fingerprint.Digest()},
		Program:     [2]string{a.Run.Program.Digest, b.Run.Program.Digest},
		Text:        [2]string{a.digestOf("text"), b.digestOf("text")},
	}
	if c.Fingerprint[0] != c.Fingerprint[1] {
		c.Mismatches = append(c.Mismatches, DiffFingerprints(a.Fingerprint, b.Fingerprint)...)
	}
	if c.Program[0] != c.Program[1] {
		c.Mismatches = append(c.Mismatches, diffPrograms(a.Run.Program, b.Run.Program)...)
	}
	switch {
	case c.Text[0] == "" || c.Text[1] == "":
		c.Mismatches = append(c.Mismatches, Mismatch{"text", orNone(c.Text[0]), orNone(c.Text[1])})
	case c.Text[0] != c.Text[1]:
		c.Mismatches = append(c.Mismatches, Mismatch{"text", c.Text[0], c.Text[1]})
	}
	c.Mismatches = append(c.Mismatches, diffMapped(a.Run.Mapped, b.Run.Mapped)...)
	if a.Run.Command != b.Run.Command {
		// Same template, different pack: an A/B. A different template (context size, batch,
		// threads, flags) scores differently by itself.
		c.Mismatches = append(c.Mismatches, Mismatch{"run.command", a.Run.Command, b.Run.Command})
	}
	sa, sb := a.Run.Scores, b.Run.Scores
	if sa.Chunks != sb.Chunks {
		c.Mismatches = append(c.Mismatches, Mismatch{"chunks", strconv.Itoa(sa.Chunks), strconv.Itoa(sb.Chunks)})
	}
	if sa.PPLSource != sb.PPLSource {
		c.Mismatches = append(c.Mismatches, Mismatch{"ppl_source", sa.PPLSource, sb.PPLSource})
	}
	c.Comparable = len(c.Mismatches) == 0
	if !c.Comparable && !crossMachine {
		parts := make([]string, len(c.Mismatches))
		for i, m := range c.Mismatches {
			parts[i] = m.String()
		}
		return c, fmt.Errorf("%w: %s", ErrNotComparable, strings.Join(parts, "; "))
	}
	c.Metrics = append(c.Metrics, metric("ppl", sa.PPL, sb.PPL))
	var keys []string
	for k := range sa.KLD {
		if _, ok := sb.KLD[k]; ok && !strings.HasSuffix(k, "_err") {
			keys = append(keys, k)
		}
	}
	order := map[string]int{}
	for i, k := range KLDKeys() {
		order[k] = i
	}
	sort.Slice(keys, func(i, j int) bool { return order[keys[i]] < order[keys[j]] })
	for _, k := range keys {
		c.Metrics = append(c.Metrics, metric("kld."+k, sa.KLD[k], sb.KLD[k]))
	}
	return c, nil
}

func metric(name string, a, b float64) Metric {
	m := Metric{Name: name, A: a, B: b}
	if d := (b - a) / a; a != 0 && !math.IsInf(d, 0) && !math.IsNaN(d) {
		m.RelDiff = &d
	}
	return m
}

func orNone(s string) string {
	if s == "" {
		return "not recorded"
	}
	return s
}

// DiffFingerprints lists the parts of the key material in which a and b differ. When their
// digests differ the list is not empty.
func DiffFingerprints(a, b *Fingerprint) []Mismatch {
	var out []Mismatch
	add := func(part, x, y string) {
		if x != y {
			out = append(out, Mismatch{part, x, y})
		}
	}
	ma, mb := a.Machine, b.Machine
	add("machine.hostname", ma.Hostname, mb.Hostname)
	add("machine.machine_id", ma.MachineIDDigest, mb.MachineIDDigest)
	add("machine.cpu_model", ma.CPUModel, mb.CPUModel)
	add("machine.cpus", strconv.Itoa(ma.CPUs), strconv.Itoa(mb.CPUs))
	add("machine.mem_total_kb", strconv.FormatInt(ma.MemTotalKB, 10), strconv.FormatInt(mb.MemTotalKB, 10))
	add("machine.arch", ma.Arch, mb.Arch)
	sa, sb := a.System, b.System
	add("kernel.release", sa.KernelRelease, sb.KernelRelease)
	add("kernel.version", sa.KernelVersion, sb.KernelVersion)
	add("kernel.cmdline", sa.Cmdline, sb.Cmdline)
	add("npu_driver", sa.NPUDriver, sb.NPUDriver)
	if (sa.Modules == nil) != (sb.Modules == nil) {
		out = append(out, Mismatch{"modules", readable(sa.Modules != nil), readable(sb.Modules != nil)})
	}
	modsA, modsB := map[string]int64{}, map[string]int64{}
	for _, m := range sa.Modules {
		modsA[m.Name] = m.Size
	}
	for _, m := range sb.Modules {
		modsB[m.Name] = m.Size
	}
	for _, name := range unionKeys(modsA, modsB) {
		x, inA := modsA[name]
		y, inB := modsB[name]
		add("module "+name, sizeOrAbsent(x, inA), sizeOrAbsent(y, inB))
	}
	envA, envB := map[string]string{}, map[string]string{}
	for k, v := range a.Env {
		envA[k] = "=" + v
	}
	for k, v := range b.Env {
		envB[k] = "=" + v
	}
	for _, k := range unionKeys(envA, envB) {
		x, y := envA[k], envB[k]
		if x == "" {
			x = "unset"
		}
		if y == "" {
			y = "unset"
		}
		add("env "+k, strings.TrimPrefix(x, "="), strings.TrimPrefix(y, "="))
	}
	add("env_allow", strings.Join(a.EnvAllow, ","), strings.Join(b.EnvAllow, ","))
	if len(out) == 0 && a.Digest() != b.Digest() {
		out = append(out, Mismatch{"fingerprint", a.Digest(), b.Digest()})
	}
	return out
}

// diffPrograms names the objects whose digests differ, or the whole program when the object
// lists differ in shape.
func diffPrograms(a, b *Program) []Mismatch {
	// Keyed as in programDigest: shared objects by name, the program and interpreters by role
	// (and position, for nested #! interpreters).
	index := func(p *Program) map[string]string {
		m, seen := map[string]string{}, map[string]int{}
		for _, o := range p.Objects {
			key := o.Role + " " + o.Name
			if o.Role != RoleNeeded && o.Role != RolePreload {
				seen[o.Role]++
				key = o.Role
				if seen[o.Role] > 1 {
					key += fmt.Sprintf(" #%d", seen[o.Role])
				}
			}
			m[key] = orUnresolved(o)
		}
		return m
	}
	da, db := index(a), index(b)
	var out []Mismatch
	for _, k := range unionKeys(da, db) {
		x, y := da[k], db[k]
		if x != y {
			out = append(out, Mismatch{"program: " + k, orAbsent(x), orAbsent(y)})
		}
	}
	if len(out) == 0 {
		out = append(out, Mismatch{"program", a.Digest, b.Digest})
	}
	return out
}

func orUnresolved(o Object) string {
	if o.Path == "" {
		return "unresolved"
	}
	return o.Digest
}

func orAbsent(s string) string {
	if s == "" {
		return "absent"
	}
	return s
}

func readable(ok bool) string {
	if ok {
		return "readable"
	}
	return Unreadable
}

func sizeOrAbsent(v int64, ok bool) string {
	if !ok {
		return "not loaded"
	}
	return "size " + strconv.FormatInt(v, 10)
}

func unionKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range []map[string]V{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// diffMapped names objects mapped at run time in both runs under the same file name but with
// different contents (another build of a dlopen()ed backend). An object seen in one run only is
// not a mismatch: sampling can miss a short-lived mapping.
func diffMapped(a, b []Object) []Mismatch {
	byName := map[string]string{}
	for _, o := range a {
		byName[o.Name] = orUnresolved(o)
	}
	var out []Mismatch
	for _, o := range b {
		if x, ok := byName[o.Name]; ok && x != orUnresolved(o) {
			out = append(out, Mismatch{"mapped " + o.Name, x, orUnresolved(o)})
		}
	}
	return out
}
