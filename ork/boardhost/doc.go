// Package boardhost is the board-host half of "verify on board": it records what the host that
// drives an RK3588 NPU looks like (the environment fingerprint), runs the runtime against a pulled
// pack under guard (the run), and writes and compares the result (the report).
//
// It knows nothing about the orkpack or GGUF formats: integrity, stub and fit checks belong to
// ork/pack and ork/gguf and plug into a [Report] as [Check] values appended by the caller.
//
// # Fingerprint
//
// [Collect] reads, under a filesystem root that defaults to "/":
//
//   - machine identity: proc/sys/kernel/hostname, the BLAKE3 of etc/machine-id (never the id
//     itself), the CPU model (proc/cpuinfo "model name", else the device-tree model plus the
//     distinct "CPU part" values), the number of processors listed, MemTotal, the architecture
//     (proc/sys/kernel/arch);
//   - system: kernel release and build string (proc/sys/kernel/osrelease and version, the
//     same strings uname -r and uname -v print), proc/cmdline, proc/modules (name and size),
//     the NPU driver version from sys/module/rknpu/version, sys/kernel/debug/rknpu/version or
//     proc/debug/rknpu/version (first readable wins);
//   - governors (recorded, not part of the digest): cpufreq scaling_governor of every CPU and
//     every devfreq device's governor (the NPU and DDR on RK3588);
//   - the allow-listed environment variables ([DefaultEnvAllow] unless configured);
//   - the run program, when one is given: see [ResolveProgram].
//
// Anything unreadable is recorded as a [Probe] with the reason; collecting never fails because
// a file is absent (a development machine has no NPU driver).
//
// [Fingerprint.Digest] is "blake3:<hex>" of the canonical JSON of [Fingerprint.KeyMaterial]: the
// machine identity, the system and the allow-listed environment. Governors and unreadable-probe
// reasons are not in it (they describe tuning and privileges, not the machine or its software). The
// run program has its own digest, [Program.Digest], over the ordered list of (role, name, BLAKE3)
// of the program and every object the dynamic loader would map. A verify-board DAG node is keyed
// by pack digest + Fingerprint.Digest + Program.Digest + text digest.
//
// # Run
//
// [Run] executes a command given as one string. The string is split into argv without a shell:
// words are separated by blanks (space, tab, newline); inside single quotes every character is
// literal; inside double quotes a backslash escapes only '"' and '\'; outside quotes a backslash
// escapes the next character; an unterminated quote or a trailing backslash is an error. No
// globbing, variables, pipes or redirections: write `sh -c '...'` to get a shell (the static
// closure is then the shell's; the runtime shows up among the run-time mapped objects). The
// placeholders {pack}, {stub} and {text} are replaced by the input paths (also inside words, e.g.
// --model={stub}); any other {word} is an error, and a command that names neither {pack} nor
// {stub} is refused, since it could not exercise the pack.
//
// The pack, stub and text are hashed (BLAKE3, streaming) before and after the run; a change is
// the error [ErrPackChanged] / [ErrStubChanged] / [ErrTextChanged]. The command runs in its own
// process group, which is killed on timeout, on cancellation and after the command exits. A
// non-zero exit ([ErrExit]) or a timeout ([ErrTimeout]) fails with the last lines of combined
// stdout/stderr. The output is parsed with [ParsePerplexity] as it streams. While the command
// runs, the executable mappings of every process in its group are sampled from /proc (default
// every 200 ms); objects found there but not in the static closure — dlopen()ed backends, the
// real runtime behind a wrapper script or `sh -c` — are hashed after the run and recorded as
// RunRecord.Mapped (role "mapped"; not part of Program.Digest, since sampling can miss a
// short-lived mapping; [Compare] refuses two runs whose same-named mapped objects differ).
//
// # Report
//
// The report is JSON, one object:
//
//	{
//	  "format": "orkpipe.board-verify/v1",
//	  "ok": true,                                  // every check ok, and at least one check
//	  "checks": [{"name": "run", "ok": true, "detail": "..."}],
//	  "inputs": {"pack": {"path", "digest", "size"}, "stub": {...}, "text": {...}},
//	  "fingerprint": {"digest": "blake3:...", "machine": {...}, "system": {...},
//	                  "env": {...}, "governors": [...], "probes": [...]},
//	  "run": {"command", "argv", "program": {"path", "digest", "objects": [...]}, "mapped": [...],
//	          "exit_code", "duration_s", "ppl", "ppl_err", "ppl_source", "chunks", "kld": {...},
//	          "before": [...], "after": [...], "tail": [...]}
//	}
//
// [ReadReport] verifies on read: the format, the digests' syntax, "ok" against the checks, and
// the fingerprint and program digests against their recomputation from the recorded parts.
//
// # Compare
//
// [Compare] gives relative differences of the scores only when the fingerprint digest, the run
// program digest, the text digest, the run command template and the number of scored chunks
// match (same-machine A/B is the only valid comparison for 4-bit perplexity); otherwise
// [ErrNotComparable] naming every part that differs.
package boardhost
