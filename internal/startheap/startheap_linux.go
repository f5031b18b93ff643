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
)

// probe is a heap object: its address tells init which arena and chunk the heap is in.
var probe *[64]byte

func init() {
	if godebug, _ := syscall.Getenv("GODEBUG"); hasSetting(godebug, "disablethp=1") {
		status = errors.New("GODEBUG=disablethp=1")
		return
	}
	probe = new([64]byte)
	p := uintptr(unsafe.Pointer(probe))
	arena := p &^ (heapArena - 1)
	// The arena is reserved whole (PROT_NONE where not yet mapped), so the call sees no hole; the
	// reserved parts lose the advice when the runtime maps them (a new mapping over them).
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, arena, heapArena, madvHugepage); e != 0 {
		status = &adviceError{arena, e}
		return
	}
	// One 2 MiB range per call: a range the heap has not touched yet fails (EINVAL, nothing to
	// collapse) and would end a longer call early; it gets its huge page at its first fault anyway.
	chunk := p &^ (heapChunk - 1)
	for r := chunk; r < chunk+heapChunk; r += pmdHugeTLB {
		syscall.Syscall(syscall.SYS_MADVISE, r, pmdHugeTLB, madvCollapse)
	}
}

// adviceError is a refused MADV_HUGEPAGE (the package avoids fmt: its init is to run early).
type adviceError struct {
	arena uintptr
	errno syscall.Errno
}

func (e *adviceError) Error() string {
	return "madvise(MADV_HUGEPAGE) of the heap arena 0x" + strconv.FormatUint(uint64(e.arena), 16) + ": " + e.errno.Error()
}

func (e *adviceError) Unwrap() error { return e.errno }

// hasSetting reports whether the comma-separated GODEBUG value list holds setting; the last
// occurrence of a key wins, as in the runtime.
func hasSetting(list, setting string) bool {
	key := setting[:len(setting)-len(setting[indexByte(setting, '='):])+1]
	found := false
	for len(list) > 0 {
		i := indexByte(list, ',')
		item := list[:i]
		if i < len(list) {
			list = list[i+1:]
		} else {
			list = ""
		}
		if len(item) >= len(key) && item[:len(key)] == key {
			found = item == setting
		}
	}
	return found
}

// indexByte returns the index of the first c in s, or len(s).
func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return len(s)
}
