package boardhost

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RoleMapped marks an object found mapped executable in the command's processes while it ran
// but not in the static closure: a dlopen()ed plugin such as a ggml backend (GGML_BACKEND_DL)
// or the NPU backend itself, or the real runtime started by a wrapper script or `sh -c`.
const RoleMapped = "mapped"

// mapSampler polls /proc for the processes of one process group and records every file mapped
// executable by any of them. Sampling can miss an object mapped and unmapped between two polls;
// a run of seconds or more, as a perplexity run is, is sampled many times.
type mapSampler struct {
	proc     string // "/proc"
	pgid     int
	interval time.Duration
	mu       sync.Mutex
	paths    map[string]bool
}

func newMapSampler(pgid int, interval time.Duration) *mapSampler {
	return &mapSampler{proc: "/proc", pgid: pgid, interval: interval, paths: map[string]bool{}}
}

// run samples until ctx is done.
func (s *mapSampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *mapSampler) sample() {
	ents, err := os.ReadDir(s.proc)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !s.inGroup(pid) {
			continue
		}
		maps, err := os.ReadFile(filepath.Join(s.proc, e.Name(), "maps"))
		if err != nil {
			continue // exited meanwhile
		}
		s.mu.Lock()
		for _, p := range executableMappings(string(maps)) {
			s.paths[p] = true
		}
		s.mu.Unlock()
	}
}

// inGroup reads the process group from /proc/<pid>/stat ("pid (comm) state ppid pgrp ...";
// comm may contain spaces and parentheses, so fields are counted after the last ')').
func (s *mapSampler) inGroup(pid int) bool {
	b, err := os.ReadFile(filepath.Join(s.proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 2 && f[2] == strconv.Itoa(s.pgid)
}

// executableMappings returns the file paths of the executable mappings in a /proc/<pid>/maps
// text ("start-end perms offset dev inode path"; the path may contain spaces).
func executableMappings(maps string) []string {
	var out []string
	for _, line := range strings.Split(maps, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || len(f[1]) < 3 || f[1][2] != 'x' || !strings.HasPrefix(f[5], "/") {
			continue
		}
		out = append(out, strings.Join(f[5:], " "))
	}
	return out
}

// extra hashes the sampled paths that are not already objects of prog (compared by real path).
// A path the kernel reports " (deleted)" — replaced while mapped — or that is gone by now is
// recorded as unresolved.
func (s *mapSampler) extra(ctx context.Context, prog *Program) []Object {
	known := map[string]bool{}
	for _, o := range prog.Objects {
		if o.Path == "" {
			continue
		}
		if r, err := filepath.EvalSymlinks(o.Path); err == nil {
			known[r] = true
		}
		known[o.Path] = true
	}
	s.mu.Lock()
	paths := make([]string, 0, len(s.paths))
	for p := range s.paths {
		paths = append(paths, p)
	}
	s.mu.Unlock()
	sort.Strings(paths)
	var out []Object
	for _, p := range paths {
		if known[p] {
			continue
		}
		if r, err := filepath.EvalSymlinks(p); err == nil && known[r] {
			continue
		}
		o := Object{Role: RoleMapped, Name: filepath.Base(strings.TrimSuffix(p, " (deleted)")), Path: p}
		if strings.HasSuffix(p, " (deleted)") {
			o.Path, o.Unresolved = "", "file was deleted or replaced while mapped: "+p
		} else if d, err := hashFile(ctx, p); err != nil {
			o.Path, o.Unresolved = "", "cannot hash "+p+" after the run: "+err.Error()
		} else {
			o.Digest, o.Size = d.Digest, d.Size
		}
		out = append(out, o)
	}
	return out
}
