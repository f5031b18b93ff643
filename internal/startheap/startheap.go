// Package startheap asks Linux for transparent huge pages on the Go heap the binary starts with, and
// maps the executable's read-only segments in one call each (mapImage, image_linux.go), for the
// commands that start and end quickly only. It is imported for its side effect by cmd/orkpipe
// (and only there), and does its work in a package init that depends on nothing but syscall, errors,
// strconv and unsafe, so that it runs before nearly all of the binary's other package inits
// (importing golang.org/x/sys/unix moved it from the 15th init to the 82nd, after ~100 more heap
// faults).
//
// Why: every first touch of a 4 KiB page is a page fault, and on the virtual machines orkpipe runs on
// (a PVM guest: shadow page tables) a fault costs 20-40 µs where a 2 MiB huge-page fault costs about
// as much as ten. The runtime and the ~230 package inits of this binary (the Dagger SDK, grpc,
// x/net/html's entity table, regexps) touch 1.5-2 MiB of heap in ~300 such faults before main runs,
// a fifth of the start-up of a command as short as `orkpipe hash` of a small file
// (docs/performance-log.md, "Start-up and hashing, session 11" and "session 12").
//
// What: init marks the heap arena the runtime has mapped so far MADV_HUGEPAGE (the runtime does not,
// and the hosts' THP setting is usually "madvise"), then collapses (MADV_COLLAPSE) the 4 MiB heap
// chunk it allocates from into huge pages, so that the pages touched before init are not left behind
// in 4 KiB ones. The advice covers only what is mapped at that moment (typically one or two 4 MiB
// chunks): heap the runtime maps later is a new mapping without it, so the extra resident memory is
// bounded by those chunks.
//
// Which commands: only those named in shortCommands (hash, version, inspect, ...: commands that run
// for well under a minute, or hash files through mapped page cache, and whose heap stays small). A
// long process whose heap grows and shrinks — a build, `node exec`, eval, calibration, pull and
// push — pays for the advice instead: the runtime's scavenger returns parts of the advised chunks
// (MADV_DONTNEED splits a huge page) and khugepaged collapses them again, page-table changes that
// made the RTN build 1-13% slower in session 11. init learns the command from /proc/self/cmdline,
// before cobra parses anything, with Command, which skips the root command's global flags.
//
// Switch: GODEBUG=disablethp=1 (the runtime's own switch for huge pages) turns the advice off for
// every command. It is a hint: when the kernel refuses it (THP "never", no huge page free) the heap
// faults in 4 KiB pages as it always did, and nothing the program computes depends on it; Status
// says what happened.
package startheap

// status is what init did: nil after the advice was given, else why it was not.
var status error

// Status returns nil when init gave the heap the huge-page advice, or why it did not (not a short
// command, another operating system, GODEBUG=disablethp=1, the kernel's error).
func Status() error { return status }

// shortCommands are the top-level commands of cmd/orkpipe that get the advice: each starts, does
// little on the heap and ends (hash and version hash files through mapped page cache; inspect,
// describe, diff, report, compare, plan and explain read headers, indexes, manifests and JSON).
// Everything else is left alone, above all build, node (the executor's child process), eval, qerr,
// tokenize, stub, pack, rank, demo, verify, pull, push and cache, which run weights, transfers or
// whole-store walks for minutes. cmd/orkpipe's tests check that each name is a real command and
// that the long ones are not here.
var shortCommands = [...]string{
	"compare", "completion", "describe", "diff", "explain", "hash", "help", "inspect", "key", "plan",
	"report", "version",
}

// The root command's persistent flags (cmd/orkpipe's root.go, and cobra's -h/--help): those that take
// a value, which may be the next argument, and those that do not. cmd/orkpipe's tests check these
// lists against the root command's flag set, so that a new global flag cannot make Command misread
// its value as the command.
var (
	valueFlags      = [...]string{"cache", "cpuprofile", "jobs", "mem", "memprofile"}
	boolFlags       = [...]string{"help", "json", "verbose"}
	valueShorthands = "j"
	boolShorthands  = "hv"
)

// ShortCommands returns the names of the commands that get the advice.
func ShortCommands() []string { return append([]string(nil), shortCommands[:]...) }

// GlobalFlags returns the long names and shorthands of the global flags Command knows, split into
// those that take a value and those that do not.
func GlobalFlags() (value, noValue []string, valueShort, noValueShort string) {
	return append([]string(nil), valueFlags[:]...), append([]string(nil), boolFlags[:]...), valueShorthands, boolShorthands
}

// Command returns the first argument of args (the command line without the program's name) that is
// not a global flag or a global flag's value: the command's name, as cobra finds it. It returns ""
// when there is none, or when an argument it does not know comes first (an unknown flag, "--", a
// shorthand cluster with a letter it does not know): the caller then gives no advice.
func Command(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || a == "-":
			return ""
		case len(a) > 2 && a[:2] == "--":
			name, hasValue := a[2:], false
			if eq := indexByte(name, '='); eq < len(name) {
				name, hasValue = name[:eq], true
			}
			switch {
			case contains(valueFlags[:], name):
				if !hasValue {
					i++ // the value is the next argument
				}
			case contains(boolFlags[:], name):
			default:
				return ""
			}
		case len(a) > 1 && a[0] == '-':
			// A shorthand, or a cluster of them, as cobra reads it when it looks for the command: only
			// a lone value shorthand ("-j 2") takes the next argument; in a cluster, bool letters come
			// first and a value letter takes the rest of the argument ("-vj2").
			for k := 1; k < len(a); k++ {
				c := a[k]
				if indexByte(boolShorthands, c) < len(boolShorthands) {
					continue
				}
				if indexByte(valueShorthands, c) == len(valueShorthands) {
					return ""
				}
				if len(a) == 2 {
					i++
				}
				break
			}
		default:
			return a
		}
	}
	return ""
}

// IsShort reports whether the command line args (without the program's name) runs one of the
// commands that get the advice.
func IsShort(args []string) bool { return contains(shortCommands[:], Command(args)) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

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
