//go:build linux && (amd64 || arm64)

package startheap

import (
	"errors"
	"strconv"
	"syscall"
	"unsafe"
)

const (
	madvHugepage = 14 // MADV_HUGEPAGE, the same value on every Linux architecture Go supports
	madvCollapse = 25 // MADV_COLLAPSE (Linux 6.1)

	heapArena  = 64 << 20 // the runtime's heapArenaBytes on 64-bit Linux: the unit it reserves
	heapChunk  = 4 << 20  // the page allocator's chunk (pallocChunkBytes): the unit it maps
	pmdHugeTLB = 2 << 20  // a PMD-sized transparent huge page

	cmdlineMax = 4096 // bytes of /proc/self/cmdline read: the command comes within the first few arguments
)

// probe is a heap object: its address tells init which arena and chunk the heap is in.
var probe *[64]byte

func init() {
	args, err := cmdline()
	if err != nil {
		status, imageStatus = err, err
		return
	}
	if !IsShort(args) {
		status = &notShortError{Command(args)}
		imageStatus = status
		return
	}
	status = adviseHeap()
	imageStatus = mapImage() // after the advice: the advice's collapse wants the heap as the runtime left it
}

// adviseHeap gives the heap arena the huge-page advice and collapses the chunk the heap allocates
// from; it returns why it did not, or nil.
func adviseHeap() error {
	if godebug, _ := syscall.Getenv("GODEBUG"); hasSetting(godebug, "disablethp=1") {
		return errors.New("GODEBUG=disablethp=1")
	}
	probe = new([64]byte)
	p := uintptr(unsafe.Pointer(probe))
	arena := p &^ (heapArena - 1)
	// The arena is reserved whole (PROT_NONE where not yet mapped), so the call sees no hole; the
	// reserved parts lose the advice when the runtime maps them (a new mapping over them).
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, arena, heapArena, madvHugepage); e != 0 {
		return &adviceError{arena, e}
	}
	// One 2 MiB range per call: a range the heap has not touched yet fails (EINVAL, nothing to
	// collapse) and would end a longer call early; it gets its huge page at its first fault anyway.
	chunk := p &^ (heapChunk - 1)
	for r := chunk; r < chunk+heapChunk; r += pmdHugeTLB {
		syscall.Syscall(syscall.SYS_MADVISE, r, pmdHugeTLB, madvCollapse)
	}
	return nil
}

// cmdline returns the process's arguments after the program's name, from /proc/self/cmdline (os.Args
// is set by package os's init, which has not run yet). Only the first cmdlineMax bytes are read: an
// argument cut there is dropped, which can only leave Command without a command (no advice).
func cmdline() ([]string, error) {
	fd, err := syscall.Open("/proc/self/cmdline", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &cmdlineError{err}
	}
	defer syscall.Close(fd)
	var buf [cmdlineMax]byte
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &cmdlineError{err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	var args []string
	start := 0
	for i := 0; i < n; i++ {
		if buf[i] == 0 {
			args = append(args, string(buf[start:i]))
			start = i + 1
		}
	}
	if len(args) == 0 {
		return nil, &cmdlineError{errors.New("no program name")}
	}
	return args[1:], nil
}

// notShortError is the status of a command that does not get the advice.
type notShortError struct{ command string }

func (e *notShortError) Error() string {
	if e.command == "" {
		return "no advice: no command found before an argument Command does not know"
	}
	return "no advice: " + strconv.Quote(e.command) + " is not a short command"
}

// cmdlineError is an unreadable /proc/self/cmdline.
type cmdlineError struct{ err error }

func (e *cmdlineError) Error() string { return "reading /proc/self/cmdline: " + e.err.Error() }
func (e *cmdlineError) Unwrap() error { return e.err }

// adviceError is a refused MADV_HUGEPAGE (the package avoids fmt: its init is to run early).
type adviceError struct {
	arena uintptr
	errno syscall.Errno
}

func (e *adviceError) Error() string {
	return "madvise(MADV_HUGEPAGE) of the heap arena 0x" + strconv.FormatUint(uint64(e.arena), 16) + ": " + e.errno.Error()
}

func (e *adviceError) Unwrap() error { return e.errno }
