// Package startheap asks Linux for transparent huge pages on the Go heap the binary starts with. It
// is imported for its side effect by cmd/orkpipe (and only there), and does its work in a package
// init that depends on nothing but syscall and unsafe, so that it runs before nearly all of the
// binary's other package inits.
//
// Why: every first touch of a 4 KiB page is a page fault, and on the virtual machines orkpipe runs on
// (a PVM guest: shadow page tables) a fault costs 20-40 µs where a 2 MiB huge-page fault costs about
// as much as ten. The runtime and the ~230 package inits of this binary (the Dagger SDK, grpc,
// x/net/html's entity table, regexps) touch 1.5-2 MiB of heap in ~300 such faults before main runs,
// a fifth of the start-up of a command as short as `orkpipe hash` of a small file
// (docs/performance.md, "Start-up and hashing, session 11").
//
// What: init marks the heap arena the runtime has mapped so far MADV_HUGEPAGE (the runtime does not,
// and the hosts' THP setting is usually "madvise"), then collapses (MADV_COLLAPSE) the 4 MiB heap
// chunk it allocates from into huge pages, so that the pages touched before init are not left behind
// in 4 KiB ones. The advice covers only what is mapped at that moment (typically one or two 4 MiB
// chunks): heap the runtime maps later is a new mapping without it, so the extra resident memory is
// bounded by those chunks. Setting GODEBUG=disablethp=1 (the runtime's own switch for huge pages)
// skips it. It is a hint: when the kernel refuses it (THP "never", no huge page free) the heap faults
// in 4 KiB pages as it always did, and nothing the program computes depends on it; Status says what
// happened.
package startheap

// status is what init did: nil after the advice was given, else why it was not.
var status error

// Status returns nil when init gave the heap the huge-page advice, or why it did not (another
// operating system, GODEBUG=disablethp=1, the kernel's error).
func Status() error { return status }
