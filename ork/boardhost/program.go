package boardhost

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Object roles in a [Program].
const (
	RoleProgram           = "program"            // the file argv[0] names
	RoleScriptInterpreter = "script-interpreter" // the #! interpreter of a script
	RoleInterpreter       = "interpreter"        // the ELF PT_INTERP (the dynamic loader)
	RolePreload           = "preload"            // an LD_PRELOAD object
	RoleNeeded            = "needed"             // a DT_NEEDED shared object
)

// Object is one file the run program consists of.
type Object struct {
	Role       string `json:"role"`
	Name       string `json:"name"`                 // as written: argv[0], PT_INTERP, DT_NEEDED, LD_PRELOAD entry
	Path       string `json:"path,omitempty"`       // the file found; empty when unresolved
	Digest     string `json:"digest,omitempty"`     // BLAKE3 of the file
	Size       int64  `json:"size,omitempty"`       // bytes hashed
	NeededBy   string `json:"needed_by,omitempty"`  // path of the object whose DT_NEEDED named it
	Unresolved string `json:"unresolved,omitempty"` // why no file was found
}

// Program is the run program and the closure of objects the dynamic loader would map for it.
type Program struct {
	Path    string   `json:"path"`
	Digest  string   `json:"digest"`
	Objects []Object `json:"objects"`
	Notes   []string `json:"notes,omitempty"` // how the search was done where it deviated from the loader's
}

// programDigest is BLAKE3 over "role NUL name NUL digest-or-unresolved LF" per object in order,
// where name is the DT_NEEDED or LD_PRELOAD name and empty for the program and interpreters
// (whose names are paths): two programs made of the same bytes and loading the same bytes have
// the same digest wherever they are installed.
func programDigest(objs []Object) string {
	var b strings.Builder
	for _, o := range objs {
		id := o.Digest
		if o.Path == "" {
			id = "unresolved"
		}
		name := o.Name
		if o.Role != RoleNeeded && o.Role != RolePreload {
			name = ""
		}
		fmt.Fprintf(&b, "%s\x00%s\x00%s\n", o.Role, name, id)
	}
	return sumBytes([]byte(b.String()))
}

// Unresolved lists the names of objects that were not found.
func (p *Program) Unresolved() []string {
	var names []string
	for _, o := range p.Objects {
		if o.Path == "" {
			names = append(names, o.Name)
		}
	}
	return names
}

// ResolveOption configures [ResolveProgram].
type ResolveOption func(*resolveConfig) error

type resolveConfig struct {
	env      []string
	ldCache  string
	ldSoConf string
	sysDirs  []string
}

// WithResolveEnv sets the environment the program will run with (PATH, LD_LIBRARY_PATH,
// LD_PRELOAD are read from it). Default: os.Environ().
func WithResolveEnv(env []string) ResolveOption {
	return func(c *resolveConfig) error {
		for _, kv := range env {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("%w: environment entry %q is not KEY=VALUE", ErrOption, kv)
			}
		}
		c.env = env
		return nil
	}
}

// WithLDCache sets the ld.so.cache to consult (default /etc/ld.so.cache) and the ld.so.conf
// read when the cache is absent (default /etc/ld.so.conf).
func WithLDCache(cache, conf string) ResolveOption {
	return func(c *resolveConfig) error {
		if cache == "" || conf == "" {
			return fmt.Errorf("%w: WithLDCache needs both paths", ErrOption)
		}
		c.ldCache, c.ldSoConf = cache, conf
		return nil
	}
}

// WithSystemDirs replaces the loader's default directories (searched last).
func WithSystemDirs(dirs ...string) ResolveOption {
	return func(c *resolveConfig) error {
		for _, d := range dirs {
			if !filepath.IsAbs(d) {
				return fmt.Errorf("%w: system dir %q is not absolute", ErrOption, d)
			}
		}
		c.sysDirs = dirs
		return nil
	}
}

// ResolveProgram finds argv0 (through PATH when it has no slash), hashes it and, as glibc's
// dynamic loader would, every object it maps: the PT_INTERP loader, LD_PRELOAD entries and the
// DT_NEEDED closure in breadth-first order. Each DT_NEEDED name is searched in DT_RPATH of the
// needing object and its loaders (only when the needing object has no DT_RUNPATH; an object with
// DT_RUNPATH has its DT_RPATH ignored), LD_LIBRARY_PATH, DT_RUNPATH, /etc/ld.so.cache (or, when
// absent or unreadable, the /etc/ld.so.conf directories, with a note) and the default directories
// (the multiarch triple's lib and usr/lib, lib64, usr/lib64, lib, usr/lib). $ORIGIN, $LIB and
// $PLATFORM are expanded. A candidate of another ELF class or machine is skipped, as the loader
// does. Not modelled: glibc-hwcaps subdirectories (a cache entry outside them is preferred),
// secure-execution mode and DF_1_NODEFLIB. A #! script is hashed and its interpreter resolved
// the same way (up to 4 levels). An object that cannot be found is recorded as unresolved, not
// an error; a program that is neither ELF nor a script, or an unreadable object, is an error.
func ResolveProgram(ctx context.Context, argv0 string, opts ...ResolveOption) (*Program, error) {
	cfg := resolveConfig{env: os.Environ(), ldCache: "/etc/ld.so.cache", ldSoConf: "/etc/ld.so.conf"}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	path, err := lookPath(argv0, envValue(cfg.env, "PATH"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProgram, err)
	}
	r := &resolver{ctx: ctx, cfg: cfg, prog: &Program{Path: path}}
	if err := r.resolve(path, argv0, RoleProgram, 0); err != nil {
		return nil, err
	}
	r.prog.Digest = programDigest(r.prog.Objects)
	return r.prog, nil
}

type resolver struct {
	ctx       context.Context
	cfg       resolveConfig
	prog      *Program
	cache     []LDCacheEntry
	cacheRead bool
	confDirs  []string
}

func (r *resolver) add(role, name, path, neededBy string) error {
	d, err := hashFile(r.ctx, path)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %v", ErrProgram, role, name, err)
	}
	r.prog.Objects = append(r.prog.Objects, Object{Role: role, Name: name, Path: path, Digest: d.Digest, Size: d.Size, NeededBy: neededBy})
	return nil
}

// resolve hashes the program at path and what it loads; depth counts #! levels.
func (r *resolver) resolve(path, name, role string, depth int) error {
	if err := r.add(role, name, path, ""); err != nil {
		return err
	}
	interp, isScript, err := readShebang(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrProgram, path, err)
	}
	if isScript {
		if depth >= 4 {
			return fmt.Errorf("%w: %s: more than 4 levels of #! interpreters", ErrProgram, path)
		}
		if !filepath.IsAbs(interp) {
			return fmt.Errorf("%w: %s: #! interpreter %q is not an absolute path", ErrProgram, path, interp)
		}
		return r.resolve(interp, interp, RoleScriptInterpreter, depth+1)
	}
	return r.resolveELF(path)
}

// readShebang reports whether path starts with "#!" and, if so, its interpreter. (The optional
// argument after it is part of the script's bytes, which are hashed.)
func readShebang(path string) (interp string, ok bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	line, _ := bufio.NewReaderSize(f, 256).ReadString('\n')
	if !strings.HasPrefix(line, "#!") {
		return "", false, nil
	}
	fields := strings.Fields(strings.TrimPrefix(line, "#!"))
	if len(fields) == 0 {
		return "", false, fmt.Errorf("empty #! line")
	}
	return fields[0], true, nil
}

// elfObject is what the search needs to know about one loaded ELF object.
type elfObject struct {
	path    string
	origin  string
	class   elf.Class
	machine elf.Machine
	interp  string
	soname  string
	needed  []string
	rpath   []string
	runpath []string
	hasRun  bool
	loader  *elfObject
}

func readELF(path string) (*elfObject, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	o := &elfObject{path: path, class: f.Class, machine: f.Machine, origin: filepath.Dir(path)}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("reading PT_INTERP: %w", err)
			}
			o.interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if f.Section(".dynamic") == nil && !hasDynamicProg(f) {
		return o, nil
	}
	dyn := func(tag elf.DynTag) ([]string, error) {
		v, err := f.DynString(tag)
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("reading %v: %w", tag, err)
		}
		return v, nil
	}
	if o.needed, err = dyn(elf.DT_NEEDED); err != nil {
		return nil, err
	}
	var s []string
	if s, err = dyn(elf.DT_SONAME); err != nil {
		return nil, err
	}
	if len(s) > 0 {
		o.soname = s[0]
	}
	var rp, run []string
	if rp, err = dyn(elf.DT_RPATH); err != nil {
		return nil, err
	}
	if run, err = dyn(elf.DT_RUNPATH); err != nil {
		return nil, err
	}
	o.hasRun = len(run) > 0
	for _, v := range rp {
		o.rpath = append(o.rpath, filepath.SplitList(v)...)
	}
	for _, v := range run {
		o.runpath = append(o.runpath, filepath.SplitList(v)...)
	}
	return o, nil
}

func hasDynamicProg(f *elf.File) bool {
	for _, p := range f.Progs {
		if p.Type == elf.PT_DYNAMIC {
			return true
		}
	}
	return false
}

// lookPath finds name as exec would: a name with a slash is used as is, otherwise the
// directories of pathEnv are searched for an executable regular file.
func lookPath(name, pathEnv string) (string, error) {
	check := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s: not an executable regular file", p)
		}
		return nil
	}
	if strings.Contains(name, "/") {
		abs, err := filepath.Abs(name)
		if err != nil {
			return "", err
		}
		if err := check(abs); err != nil {
			return "", fmt.Errorf("program %q: %w", name, err)
		}
		return abs, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if check(p) == nil {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("program %q: %w in PATH %q", name, fs.ErrNotExist, pathEnv)
}

// envValue returns the value of key in env (last one wins, as with getenv on a built env).
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}
