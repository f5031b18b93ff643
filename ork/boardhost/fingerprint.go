package boardhost

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Unreadable is the value recorded for a part that could not be read; the reason is in
// Fingerprint.Probes.
const Unreadable = "unreadable"

// DefaultEnvAllow are the environment variables recorded by default (path.Match patterns): the
// ork backend's switches, ggml/llama.cpp's, OpenMP's and the loader's.
var DefaultEnvAllow = []string{"ORK_*", "GGML_*", "LLAMA_*", "OMP_*", "LD_LIBRARY_PATH", "LD_PRELOAD"}

// Fingerprint describes the board host: what machine, what kernel and driver, what environment,
// and optionally what run program. It is a value: collect it once, compare and digest it
// anywhere. JSON adds "digest" and verifies it on decode.
type Fingerprint struct {
	Machine   Machine           `json:"machine"`
	System    System            `json:"system"`
	Env       map[string]string `json:"env"`
	EnvAllow  []string          `json:"env_allow"`
	Governors []Probe           `json:"governors"`
	Probes    []Probe           `json:"probes,omitempty"` // parts that could not be read, and why
	Program   *Program          `json:"program,omitempty"`
}

// Machine is the machine's identity.
type Machine struct {
	Hostname        string `json:"hostname"`
	MachineIDDigest string `json:"machine_id_digest"` // BLAKE3 of /etc/machine-id
	CPUModel        string `json:"cpu_model"`
	CPUs            int    `json:"cpus"`
	MemTotalKB      int64  `json:"mem_total_kb"`
	Arch            string `json:"arch"`
}

// System is the software the machine runs below the run program.
type System struct {
	KernelRelease string   `json:"kernel_release"` // uname -r
	KernelVersion string   `json:"kernel_version"` // uname -v: the build number and date
	Cmdline       string   `json:"cmdline"`
	Modules       []Module `json:"modules"` // sorted by name; null when /proc/modules is unreadable
	NPUDriver     string   `json:"npu_driver"`
}

// Module is one loaded kernel module.
type Module struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// Probe is one file read: its value, or why it could not be read.
type Probe struct {
	Path  string `json:"path"`
	Value string `json:"value,omitempty"`
	Error string `json:"error,omitempty"`
}

// KeyMaterial is what [Fingerprint.Digest] covers: machine, system and allow-listed environment.
type KeyMaterial struct {
	Machine  Machine           `json:"machine"`
	System   System            `json:"system"`
	Env      map[string]string `json:"env"`
	EnvAllow []string          `json:"env_allow"`
}

// KeyMaterial returns the parts of f that define "same machine + same software".
func (f *Fingerprint) KeyMaterial() KeyMaterial {
	return KeyMaterial{Machine: f.Machine, System: f.System, Env: f.Env, EnvAllow: f.EnvAllow}
}

// Digest is "blake3:<hex>" of the canonical JSON of f.KeyMaterial() (encoding/json: fixed field
// order, sorted map keys).
func (f *Fingerprint) Digest() string {
	b, err := json.Marshal(f.KeyMaterial())
	if err != nil {
		panic(fmt.Sprintf("boardhost: marshal key material: %v", err)) // plain strings and ints cannot fail
	}
	return sumBytes(b)
}

type plainFingerprint Fingerprint

// MarshalJSON adds "digest".
func (f Fingerprint) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Digest string `json:"digest"`
		plainFingerprint
	}{f.Digest(), plainFingerprint(f)})
}

// UnmarshalJSON decodes and checks "digest" against the recorded parts.
func (f *Fingerprint) UnmarshalJSON(b []byte) error {
	var v struct {
		Digest string `json:"digest"`
		plainFingerprint
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Fingerprint(v.plainFingerprint)
	if got := f.Digest(); v.Digest != got {
		return fmt.Errorf("%w: fingerprint digest %q does not match its parts (%s)", ErrReport, v.Digest, got)
	}
	return nil
}

type plainProgram Program

// UnmarshalJSON decodes and checks "digest" against the recorded objects.
func (p *Program) UnmarshalJSON(b []byte) error {
	var v plainProgram
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = Program(v)
	if got := programDigest(p.Objects); p.Digest != got {
		return fmt.Errorf("%w: program %s digest %q does not match its objects (%s)", ErrReport, p.Path, p.Digest, got)
	}
	return nil
}

// CollectOption configures [Collect].
type CollectOption func(*collectConfig) error

type collectConfig struct {
	root    string
	env     []string
	allow   []string
	program string
	resolve []ResolveOption
}

// WithRoot reads proc, sys and etc under dir instead of "/" (a captured board tree).
func WithRoot(dir string) CollectOption {
	return func(c *collectConfig) error {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("%w: root: %v", ErrOption, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: root %s is not a directory", ErrOption, dir)
		}
		c.root = dir
		return nil
	}
}

// WithEnv sets the environment to record from (default os.Environ()); pass the run's.
func WithEnv(env []string) CollectOption {
	return func(c *collectConfig) error {
		for _, kv := range env {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("%w: environment entry %q is not KEY=VALUE", ErrOption, kv)
			}
		}
		c.env = env
		return nil
	}
}

// WithEnvAllow replaces the allow-list of recorded environment variables (path.Match patterns).
func WithEnvAllow(patterns ...string) CollectOption {
	return func(c *collectConfig) error {
		for _, p := range patterns {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				return fmt.Errorf("%w: environment pattern %q is not a valid path.Match pattern", ErrOption, p)
			}
		}
		c.allow = append([]string(nil), patterns...)
		return nil
	}
}

// WithProgram also fingerprints the run program argv0 (see [ResolveProgram]); the environment
// given to WithEnv is used to resolve it unless opts say otherwise.
func WithProgram(argv0 string, opts ...ResolveOption) CollectOption {
	return func(c *collectConfig) error {
		if argv0 == "" {
			return fmt.Errorf("%w: empty program", ErrOption)
		}
		c.program, c.resolve = argv0, opts
		return nil
	}
}

// Collect fingerprints this host. Unreadable parts are recorded, not errors; only a run
// program that cannot be fingerprinted (or ctx) fails it.
func Collect(ctx context.Context, opts ...CollectOption) (*Fingerprint, error) {
	cfg := collectConfig{root: "/", env: os.Environ(), allow: DefaultEnvAllow}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	c := &collector{root: cfg.root}
	f := &Fingerprint{
		Machine:  c.machine(),
		System:   c.system(),
		Env:      allowedEnv(cfg.env, cfg.allow),
		EnvAllow: append([]string(nil), cfg.allow...),
	}
	f.Governors = c.governors()
	f.Probes = c.probes
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg.program != "" {
		ropts := append([]ResolveOption{WithResolveEnv(cfg.env)}, cfg.resolve...)
		p, err := ResolveProgram(ctx, cfg.program, ropts...)
		if err != nil {
			return nil, err
		}
		f.Program = p
	}
	return f, nil
}

func allowedEnv(env, allow []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		for _, p := range allow {
			if ok, _ := path.Match(p, k); ok {
				out[k] = v
				break
			}
		}
	}
	return out
}

// collector reads files under root and records what it could not read.
type collector struct {
	root   string
	probes []Probe
}

func (c *collector) path(p string) string { return filepath.Join(c.root, p) }

// read returns the trimmed content of p (relative to root), or "" and a recorded probe.
func (c *collector) read(p string) (string, bool) {
	b, err := os.ReadFile(c.path(p))
	if err != nil {
		c.probes = append(c.probes, Probe{Path: "/" + p, Error: err.Error()})
		return "", false
	}
	return strings.TrimSpace(strings.TrimRight(string(b), "\x00")), true
}

func (c *collector) readOr(p string) string {
	if v, ok := c.read(p); ok {
		return v
	}
	return Unreadable
}

func (c *collector) system() System {
	s := System{
		KernelRelease: c.readOr("proc/sys/kernel/osrelease"),
		KernelVersion: c.readOr("proc/sys/kernel/version"),
		Cmdline:       c.readOr("proc/cmdline"),
		Modules:       c.modules(),
		NPUDriver:     Unreadable,
	}
	for _, p := range []string{"sys/module/rknpu/version", "sys/kernel/debug/rknpu/version", "proc/debug/rknpu/version"} {
		if v, ok := c.read(p); ok {
			s.NPUDriver = v
			break
		}
	}
	return s
}

// modules parses /proc/modules: "name size refcount deps state address" per line.
func (c *collector) modules() []Module {
	text, ok := c.read("proc/modules")
	if !ok {
		return nil
	}
	mods := []Module{}
	for i, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var size int64
		if len(f) < 2 || sscanInt(f[1], &size) != nil {
			c.probes = append(c.probes, Probe{Path: "/proc/modules", Error: fmt.Sprintf("line %d: want \"name size ...\", got %q", i+1, line)})
			continue
		}
		mods = append(mods, Module{Name: f[0], Size: size})
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Name < mods[j].Name })
	return mods
}

func (c *collector) governors() []Probe {
	out := []Probe{}
	for _, pattern := range []string{"sys/devices/system/cpu/cpu*/cpufreq/scaling_governor", "sys/class/devfreq/*/governor"} {
		matches, _ := filepath.Glob(c.path(pattern))
		if len(matches) == 0 {
			out = append(out, Probe{Path: "/" + pattern, Error: "no such files"})
			continue
		}
		sort.Strings(matches)
		for _, m := range matches {
			rel, _ := filepath.Rel(c.root, m)
			p := Probe{Path: "/" + filepath.ToSlash(rel)}
			if b, err := os.ReadFile(m); err != nil {
				p.Error = err.Error()
			} else {
				p.Value = strings.TrimSpace(string(b))
			}
			out = append(out, p)
		}
	}
	return out
}
