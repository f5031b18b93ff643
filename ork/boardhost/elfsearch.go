package boardhost

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// resolveELF maps the ELF program at path: its interpreter, LD_PRELOAD and the DT_NEEDED closure.
func (r *resolver) resolveELF(path string) error {
	main, err := readELF(path)
	if err != nil {
		return fmt.Errorf("%w: %s is neither an ELF file nor a #! script: %v", ErrProgram, path, err)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		main.origin = filepath.Dir(real)
	}
	loaded := map[string]bool{} // names (as needed and sonames) and real paths already mapped
	markLoaded := func(o *elfObject, name string) {
		loaded[name] = true
		if o.soname != "" {
			loaded[o.soname] = true
		}
		if real, err := filepath.EvalSymlinks(o.path); err == nil {
			loaded["path:"+real] = true
		}
	}
	markLoaded(main, path)
	if main.interp != "" {
		if err := r.add(RoleInterpreter, main.interp, main.interp, path); err != nil {
			return err
		}
		if io, err := readELF(main.interp); err == nil {
			markLoaded(io, main.interp)
			loaded[filepath.Base(main.interp)] = true
		}
	}
	if main.interp == "" && len(main.needed) == 0 {
		return nil // statically linked: nothing else is mapped
	}
	queue := []*elfObject{}
	visit := func(role, name string, by *elfObject) error {
		if loaded[name] || loaded[filepath.Base(name)] && strings.Contains(name, "/") {
			return nil
		}
		found, why := r.search(name, by, main)
		if found == "" {
			loaded[name] = true
			r.prog.Objects = append(r.prog.Objects, Object{Role: role, Name: name, NeededBy: by.path, Unresolved: why})
			return nil
		}
		real, _ := filepath.EvalSymlinks(found)
		if loaded["path:"+real] {
			loaded[name] = true
			return nil
		}
		o, err := readELF(found)
		if err != nil {
			return fmt.Errorf("%w: %s (needed by %s): %v", ErrProgram, found, by.path, err)
		}
		o.loader = by
		markLoaded(o, name)
		if err := r.add(role, name, found, by.path); err != nil {
			return err
		}
		queue = append(queue, o)
		return nil
	}
	for _, p := range strings.FieldsFunc(envValue(r.cfg.env, "LD_PRELOAD"), func(c rune) bool { return c == ' ' || c == ':' }) {
		if err := visit(RolePreload, p, main); err != nil {
			return err
		}
	}
	for _, n := range main.needed {
		if err := visit(RoleNeeded, n, main); err != nil {
			return err
		}
	}
	for len(queue) > 0 {
		o := queue[0]
		queue = queue[1:]
		for _, n := range o.needed {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			if err := visit(RoleNeeded, n, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// search returns the file the loader would map for name needed by obj, or "" and why not.
func (r *resolver) search(name string, obj, main *elfObject) (string, string) {
	if strings.Contains(name, "/") {
		if r.compatible(name, main) {
			return name, ""
		}
		return "", "no compatible ELF file at that path"
	}
	try := func(dirs []string, o *elfObject) string {
		for _, d := range dirs {
			d = expandDST(d, o)
			if d == "" {
				continue
			}
			if p := filepath.Join(d, name); r.compatible(p, main) {
				return p
			}
		}
		return ""
	}
	if !obj.hasRun {
		for l := obj; l != nil; l = l.loader {
			if l.hasRun {
				continue
			}
			if p := try(l.rpath, l); p != "" {
				return p, ""
			}
		}
	}
	if p := try(strings.FieldsFunc(envValue(r.cfg.env, "LD_LIBRARY_PATH"), func(c rune) bool { return c == ':' || c == ';' }), obj); p != "" {
		return p, ""
	}
	if p := try(obj.runpath, obj); p != "" {
		return p, ""
	}
	if p := r.fromCache(name, main); p != "" {
		return p, ""
	}
	if p := try(r.confDirs, obj); p != "" {
		return p, ""
	}
	if p := try(r.systemDirs(main), obj); p != "" {
		return p, ""
	}
	return "", "not found in RPATH, LD_LIBRARY_PATH, RUNPATH, ld.so.cache or the default directories"
}

// fromCache looks name up in ld.so.cache, reading the cache (or ld.so.conf when the cache is
// unusable) on first use. Entries outside glibc-hwcaps directories are preferred.
func (r *resolver) fromCache(name string, main *elfObject) string {
	if !r.cacheRead {
		r.cacheRead = true
		data, err := os.ReadFile(r.cfg.ldCache)
		if err == nil {
			r.cache, err = ParseLDCache(data)
		}
		if err != nil {
			r.prog.Notes = append(r.prog.Notes, fmt.Sprintf("ld.so.cache %s unusable (%v): searched the directories of %s instead", r.cfg.ldCache, err, r.cfg.ldSoConf))
			r.confDirs = readLDSoConf(r.cfg.ldSoConf, map[string]bool{})
		}
	}
	for _, pass := range []bool{false, true} {
		for _, e := range r.cache {
			if e.Name == name && (e.HWCap&hwcapExtension != 0) == pass && r.compatible(e.Path, main) {
				return e.Path
			}
		}
	}
	return ""
}

// compatible reports whether path is an ELF file of main's class and machine.
func (r *resolver) compatible(path string, main *elfObject) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Class == main.class && f.Machine == main.machine
}

// systemDirs are the loader's built-in directories for main's architecture.
func (r *resolver) systemDirs(main *elfObject) []string {
	if r.cfg.sysDirs != nil {
		return r.cfg.sysDirs
	}
	var dirs []string
	if t := multiarchTriple(main.machine, main.class); t != "" {
		dirs = append(dirs, "/lib/"+t, "/usr/lib/"+t)
	}
	if main.class == elf.ELFCLASS64 {
		dirs = append(dirs, "/lib64", "/usr/lib64")
	}
	return append(dirs, "/lib", "/usr/lib")
}

func multiarchTriple(m elf.Machine, c elf.Class) string {
	switch m {
	case elf.EM_X86_64:
		return "x86_64-linux-gnu"
	case elf.EM_AARCH64:
		return "aarch64-linux-gnu"
	case elf.EM_ARM:
		return "arm-linux-gnueabihf"
	case elf.EM_386:
		return "i386-linux-gnu"
	case elf.EM_RISCV:
		if c == elf.ELFCLASS64 {
			return "riscv64-linux-gnu"
		}
	}
	return ""
}

// expandDST expands the dynamic string tokens $ORIGIN, $LIB and $PLATFORM (also as ${...}) in
// one RPATH/RUNPATH/LD_LIBRARY_PATH entry for object o. Unknown tokens make the entry unusable
// (""), as glibc drops such entries.
func expandDST(dir string, o *elfObject) string {
	if !strings.Contains(dir, "$") {
		return dir
	}
	lib := "lib"
	if o.class == elf.ELFCLASS64 {
		lib = "lib64"
	}
	platform := map[elf.Machine]string{elf.EM_X86_64: "x86_64", elf.EM_AARCH64: "aarch64", elf.EM_ARM: "armv7l", elf.EM_386: "i686"}[o.machine]
	repl := strings.NewReplacer("${ORIGIN}", o.origin, "$ORIGIN", o.origin, "${LIB}", lib, "$LIB", lib, "${PLATFORM}", platform, "$PLATFORM", platform)
	out := repl.Replace(dir)
	if strings.Contains(out, "$") {
		return ""
	}
	return out
}
