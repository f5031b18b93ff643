package daggerenv

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CheckBinary reports whether path is a static linux/amd64 ELF executable (no program
// interpreter, so it runs in a container from scratch).
func CheckBinary(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadBinary, path, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Class != elf.ELFCLASS64 {
		return fmt.Errorf("%w: %s is for %s, want x86-64 (build with GOOS=linux GOARCH=amd64)", ErrBadBinary, path, f.Machine)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%w: %s is an ELF %s, want an executable", ErrBadBinary, path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%w: %s is dynamically linked (build with CGO_ENABLED=0)", ErrBadBinary, path)
		}
	}
	return nil
}

// SelfBinary returns the running executable if it is a static linux/amd64 binary.
func SelfBinary() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%w: locating the running binary: %v", ErrBadBinary, err)
	}
	if err := CheckBinary(p); err != nil {
		return "", err
	}
	return p, nil
}

// ModuleRoot returns the root of the orkpipe module containing dir, or an error if dir is not
// inside it (its go.mod must declare `module orkpipe`).
func ModuleRoot(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", "GOMOD")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD in %s: %w", dir, err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("%s is not inside a Go module", dir)
	}
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if f := strings.Fields(string(line)); len(f) == 2 && f[0] == "module" {
			if f[1] != "orkpipe" {
				return "", fmt.Errorf("%s declares module %s, not orkpipe", gomod, f[1])
			}
			return filepath.Dir(gomod), nil
		}
	}
	return "", fmt.Errorf("%s declares no module", gomod)
}

// BuildBinary builds the static linux/amd64 orkpipe binary (CGO_ENABLED=0 GOOS=linux
// GOARCH=amd64 go build -trimpath ./cmd/orkpipe) from the module at root into out, and checks it.
func BuildBinary(ctx context.Context, root, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/orkpipe")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the container's orkpipe binary in %s: %w\n%s", root, err, Tail(string(b), 20))
	}
	return CheckBinary(out)
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ExecutorName is the program that runs nodes on a Dagger engine for orkpipe (cmd/orkpipe-dagger):
// the one that links the Dagger SDK.
const ExecutorName = "orkpipe-dagger"

// EnvExecutor names the orkpipe-dagger program to run, overriding FindExecutor's search.
const EnvExecutor = "ORKPIPE_DAGGER_EXECUTOR"

// FindExecutor returns the orkpipe-dagger program: $ORKPIPE_DAGGER_EXECUTOR when set, else the one
// beside the running executable (where `go install ./cmd/...` puts both), else the one on PATH. It
// returns an error wrapping ErrNoExecutor when there is none (or the variable names no program).
func FindExecutor() (string, error) {
	if p := os.Getenv(EnvExecutor); p != "" {
		abs, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("%w: %s=%q: %v", ErrNoExecutor, EnvExecutor, p, err)
		}
		return abs, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), ExecutorName)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(ExecutorName); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: none beside this orkpipe, none on PATH and %s is not set; install it with "+
		"`CGO_ENABLED=0 go install ./cmd/orkpipe ./cmd/orkpipe-dagger` (docs/dagger.md)", ErrNoExecutor, EnvExecutor)
}

// BuildExecutor builds orkpipe-dagger (go build ./cmd/orkpipe-dagger) from the module at root
// into out.
func BuildExecutor(ctx context.Context, root, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/"+ExecutorName)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s in %s: %w\n%s", ExecutorName, root, err, Tail(string(b), 20))
	}
	return nil
}
