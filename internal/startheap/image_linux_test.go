//go:build linux && (amd64 || arm64)

package startheap

import (
	"debug/elf"
	"os"
	"testing"
)

// TestProgHeaders: progHeaders reads the test binary's program headers as debug/elf does.
func TestProgHeaders(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	got, err := progHeaders(b[:min(len(b), headerBytes)])
	if err != nil {
		t.Fatalf("%s: %v", exe, err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(got) != len(f.Progs) {
		t.Fatalf("%d program headers, debug/elf reads %d", len(got), len(f.Progs))
	}
	for i, p := range f.Progs {
		want := progHeader{typ: uint32(p.Type), flags: uint32(p.Flags), off: p.Off, vaddr: p.Vaddr, filesz: p.Filesz}
		if got[i] != want {
			t.Errorf("program header %d: %+v, debug/elf reads %+v", i, got[i], want)
		}
	}
	for _, bad := range [][]byte{nil, b[:63], append([]byte("\x7fELF\x01"), b[5:64]...), b[:64+10]} {
		if _, err := progHeaders(bad); err == nil {
			t.Errorf("progHeaders of %d bytes (%q...) = nil error, want a refusal", len(bad), bad[:min(len(bad), 5)])
		}
	}
}

// FuzzProgHeaders: any bytes give program headers inside the input or an error, never a panic.
func FuzzProgHeaders(f *testing.F) {
	if exe, err := os.Executable(); err == nil {
		if b, err := os.ReadFile(exe); err == nil {
			f.Add(b[:min(len(b), headerBytes)])
		}
	}
	f.Add([]byte("\x7fELF\x02\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, err := progHeaders(b)
		if err == nil && len(hs) > len(b)/56 {
			t.Fatalf("%d program headers from %d bytes", len(hs), len(b))
		}
	})
}
