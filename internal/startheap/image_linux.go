//go:build linux && (amd64 || arm64)

package startheap

import (
	"errors"
	"strconv"
	"syscall"
	"unsafe"
)

// ELF and Linux constants (debug/elf's and golang.org/x/sys/unix's values: neither is imported, as
// their package inits, and those of the packages they import, would then run before this one).
const (
	atPHDR = 3 // AT_PHDR: the address of the program headers in memory
	ptLoad = 1 // PT_LOAD
	ptPHDR = 6 // PT_PHDR: the program headers' own entry (Go's linker writes one, PIE or not)
	pfW    = 2 // PF_W: a writable segment

	sysCachestat     = 451 // cachestat(2), Linux 6.5: the same number on every architecture
	madvPopulateRead = 22  // MADV_POPULATE_READ, Linux 5.14
)

// cachestatRange and cachestatResult are cachestat(2)'s struct cachestat_range and struct cachestat.
type cachestatRange struct{ off, len uint64 }

type cachestatResult struct{ cache, dirty, writeback, evicted, recentlyEvicted uint64 }

// progHeader is the part of an ELF64 program header (Elf64_Phdr) mapImage reads.
type progHeader struct {
	typ, flags         uint32
	off, vaddr, filesz uint64
}

// headerBytes is how much of the executable's start mapImage reads: the ELF header and the program
// headers, which linkers put right after it (Go's: 6 of them, 400 bytes in all).
const headerBytes = 4096

// mapImage maps every page of the executable's read-only segments (text, rodata: pclntab, types,
// itabs) into the page table in one MADV_POPULATE_READ per segment, so that the runtime and the
// package inits that follow find them mapped instead of faulting them in 64 KiB (fault-around) at a
// time. On a PVM guest a fault costs ~20 µs: `orkpipe hash` of a 5-byte file went from ~430 to ~325
// faults (text 104 -> 17, rodata 75 -> 52: what faults before this init runs) and its start from 23.1
// to 18.6 ms, `orkpipe version` from 38.7 to 30.3 ms (docs/performance-log.md, "Start-up, session 32").
//
// Only when the segments are already in the page cache (cachestat, Linux 6.5): populating reads what
// is missing, synchronously, and a cold start (a board host's first run from eMMC) would read all of
// text and rodata where faults read only what the start touches. It returns why it mapped nothing,
// or nil. The pages are the executable's page cache, shared and clean: mapping them costs page-table
// entries only, and they count in the process's RSS (the short commands' RSS grows by the two
// segments, ~18 MB for orkpipe on amd64).
func mapImage() error {
	fd, err := syscall.Open("/proc/self/exe", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &imageError{"/proc/self/exe", err}
	}
	defer syscall.Close(fd)
	var buf [headerBytes]byte
	n, err := syscall.Pread(fd, buf[:], 0)
	if err != nil {
		return &imageError{"reading /proc/self/exe", err}
	}
	headers, err := progHeaders(buf[:n])
	if err != nil {
		return &imageError{"/proc/self/exe", err}
	}
	// The load bias (0 unless the executable is position-independent): where its program headers
	// are in memory (AT_PHDR) against the address their own entry gives them.
	var bias uint64
	for _, h := range headers {
		if h.typ != ptPHDR {
			continue
		}
		at := uint64(0)
		auxv := runtimeGetAuxv()
		for i := 0; i+1 < len(auxv); i += 2 {
			if auxv[i] == atPHDR {
				at = uint64(auxv[i+1])
			}
		}
		if at == 0 {
			return &imageError{"the auxiliary vector", errors.New("no AT_PHDR")}
		}
		bias = at - h.vaddr
	}
	page := uint64(syscall.Getpagesize())
	for _, h := range headers {
		if h.typ != ptLoad || h.flags&pfW != 0 || h.filesz == 0 {
			continue
		}
		lead := h.vaddr % page // the segment's offset in its first page (off has the same)
		off, size := h.off-lead, (lead+h.filesz+page-1)/page*page
		var st cachestatResult
		r := cachestatRange{off: off, len: size}
		if _, _, e := syscall.Syscall6(sysCachestat, uintptr(fd), uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&st)), 0, 0, 0); e != 0 {
			return &imageError{"cachestat of /proc/self/exe", e}
		}
		if st.cache < size/page {
			return &imageError{"the segment at file offset " + strconv.FormatUint(off, 10), errors.New(strconv.FormatUint(st.cache, 10) + " of its " + strconv.FormatUint(size/page, 10) + " pages in the page cache: left to fault in")}
		}
		addr := uintptr(bias + h.vaddr - lead)
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, addr, uintptr(size), madvPopulateRead); e != 0 {
			return &imageError{"MADV_POPULATE_READ of the segment at 0x" + strconv.FormatUint(uint64(addr), 16), e}
		}
	}
	return nil
}

// runtimeGetAuxv is the runtime's copy of the auxiliary vector (key, value pairs), as
// golang.org/x/sys/unix.Auxv reads it (the runtime exports it for that package by go:linkname).
//
//go:linkname runtimeGetAuxv runtime.getAuxv
func runtimeGetAuxv() []uintptr

// progHeaders parses the program headers of a little-endian ELF64 file from its first bytes b.
func progHeaders(b []byte) ([]progHeader, error) {
	if len(b) < 64 || string(b[:4]) != "\x7fELF" || b[4] != 2 || b[5] != 1 {
		return nil, errors.New("not a little-endian ELF64 file")
	}
	phoff, phentsize, phnum := le64(b[32:]), uint64(le16(b[54:])), uint64(le16(b[56:]))
	if phentsize < 56 || phoff > uint64(len(b)) || phnum > (uint64(len(b))-phoff)/phentsize {
		return nil, errors.New("program headers not within the first " + strconv.Itoa(len(b)) + " bytes")
	}
	hs := make([]progHeader, phnum)
	for i := range hs {
		p := b[phoff+uint64(i)*phentsize:]
		hs[i] = progHeader{typ: le32(p), flags: le32(p[4:]), off: le64(p[8:]), vaddr: le64(p[16:]), filesz: le64(p[32:])}
	}
	return hs, nil
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
func le32(b []byte) uint32 { return uint32(le16(b)) | uint32(le16(b[2:]))<<16 }
func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }

// imageStatus is what mapImage did: nil after it mapped the read-only segments, else why not.
var imageStatus error

// ImageStatus returns nil when init mapped the executable's read-only segments (mapImage), or why
// it did not (not a short command, not in the page cache, a kernel without cachestat or
// MADV_POPULATE_READ, another operating system).
func ImageStatus() error { return imageStatus }

// imageError is a reason mapImage mapped nothing (strconv only: no fmt this early).
type imageError struct {
	what string
	err  error
}

func (e *imageError) Error() string { return "image not mapped: " + e.what + ": " + e.err.Error() }
func (e *imageError) Unwrap() error { return e.err }
