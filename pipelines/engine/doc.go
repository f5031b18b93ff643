// Package engine plans and runs orkpipe's content-addressed build graphs.
//
// # Graphs and plans
//
// A Graph is built node by node (Graph.Add): a node runs a registered stage kind (package stages)
// with typed parameters, and each of its named inputs is a source file (File) or an output of a
// node added before it (Node.Output) — so graphs are acyclic by construction. Exports name the
// node outputs that are the results. Engine.Plan binds every node to its kind (strict, canonical
// params), checks inputs against the stage's declared inputs and outputs, and refuses a node whose
// declared peak memory exceeds the budget (ErrOverBudget, naming the node). A Target (the demo,
// later a recipe) is anything with a name that plans into a Graph.
//
// # Keys
//
// A node's key is the BLAKE3 of the canonical JSON of its stages.KeyMaterial: stage name, stage
// version, canonical params, the digest of every input by name and of every external tool, and the
// binary's numerics (stages.Numerics: empty for the pure-Go build; the OpenBLAS library digest,
// kernel set and thread count for a -tags blas one). Source files and tools are hashed through the
// store's stat cache (dev, inode, size, mtime, ctime), so an rsync -a that restores an mtime still
// changes the key. Keys are computed bottom-up as inputs
// become known: a cached subgraph is resolved from action records without running anything.
// Engine.Status does that without running anything (plan).
//
// # Scheduling
//
// Build starts one goroutine per node; a node waits for its dependencies, computes its key, and
//
//  1. joins the in-process flight of that key if another node has identical key material (it runs
//     once; the other is reported cached, SameAs the first);
//  2. serves it from the action cache if the record's outputs are all present;
//  3. otherwise takes a job slot (-j) — while every slot is taken, a freed one goes to the waiting
//     node with the most estimated work after it (Node.Cost summed along its costliest chain of
//     dependents; 0 where no cost is set), then the longest chain of nodes after it, then the
//     larger declared memory, then the earlier in the plan — and its declared memory from a weighted semaphore sized to the budget
//     (the running nodes' estimates never sum above it), takes the cross-process key lock
//     (Store.LockKey) and looks again — another process may have built it meanwhile. A node whose
//     key another build holds gives its slot and memory back while it waits for the lock, so the
//     build's other nodes run meanwhile; it takes them again, after looking again, only if the
//     other build left no record (the lock order is explained on pass.lockKey);
//  4. verifies its input objects (Store.Verify; once per object per pass; an output this process
//     adopted and nobody wrote since is not re-hashed, see artifacts.Store.Verify), runs the stage through
//     the Executor (Local: nodeexec.Run in a Store.TempDir, the code path of `orkpipe node exec`,
//     outputs adopted into the CAS once they match the result record; Dagger: the same in a container),
//     checks that its source files did not change while it ran, and only then writes the action
//     record. Outputs become visible to other nodes and builds only through that record.
//
// With BuildOptions.Check, a node of a checked stage that step 2 would serve runs anyway (steps 3
// and 4 without the key lock, and without writing a record): its outputs are compared with the
// record's, and a difference is ErrNotReproducible — the node's dependents still run on the recorded
// outputs, so a build reports every difference, and nothing stored changes.
//
// A failure skips the node's dependents and, unless WithKeepGoing, cancels the build; errors name
// the node and its key. Cancelling ctx stops launching nodes and cancels running ones; a canceled
// node writes no record and its scratch directory is removed. If an input or an export turns out
// corrupt (the store quarantines it), the whole graph is resolved again — the producer's record is
// now a miss, so exactly the producer and what depends on the new bytes run — up to three passes.
// After the last pass the exports are verified — re-hashed, unless the stat cache holds the digest
// for the object file's unchanged (dev, inode, size, mtime, ctime), the rule sources follow, so a
// no-op rebuild stats its pack and stub instead of hashing them — materialized read-only into the
// output directory (never clobbering a file orkpipe did not write unless Force) and pinned under
// the target name.
//
// # Events
//
// Build reports to a Sink: plan (one per node), node_cached, node_verifying (input verification
// outlasting WithVerifyNotice), node_started, node_finished, node_failed, and a final summary.
// docs/cli.md documents the JSON Lines form.
//
// # Build history (explain)
//
// Every build writes one record per target for explain, by default under <store dir>/history:
//
//	history/<url.PathEscape(target)>/<start unix ns, 20 digits>-<pid>.json
//
// holding a BuildRecord: {"target", "time", "nodes": [{"node", "stage", "key", "outcome",
// "same_as", "material"}]} with each node's full key material (absent if its key was never
// computed). Records are written to a temp file and renamed; the 20 newest per target are kept.
// Explain diffs the newest two, field by field, and reports groups of nodes with identical keys;
// RecordedInputs reads every record's inputs by node key, which the action cache's records do not
// carry, for `cache gc --outdated` to follow records downstream.
// Other files of a target's directory are not records: its memo (below) and the costs of its node
// kinds that the CLI keeps for the estimate of a build's time left (progress.CostsFile).
//
// # Build memo
//
// A build in which every node was cached or executed also leaves, beside its target's records,
// history/<url.PathEscape(target)>/memo: what a no-op rebuild of the same graph reports, keyed by
// everything that outcome depends on before any node runs. Engine.BuildFromMemo serves a build
// from it without planning, computing node keys or reading action records (the CLI's build tries
// it first, as Engine.ReadMemoAhead and MemoAhead.Build: the memo is read and its outputs looked
// up in the store while the graph is planned), only when all of these hold:
//
//   - the memo key matches: the BLAKE3 of the running executable's digest (stages.ExecutablePath,
//     through the stat cache: stage kinds, versions and planning are its code), its numerics
//     (stages.Numerics; the OpenBLAS library hashed through the stat cache), the memory budget,
//     the target name, every node's id, stage, params JSON and input wiring, every source file's
//     digest (stat cache) and the exports;
//   - every tool the nodes' keys include still has its recorded digest (stat cache);
//   - every node's recorded outputs are in the store with their recorded sizes (Store.Present: an
//     lstat each);
//   - every export passes the check Build's exports pass (re-hashed unless the stat cache vouches
//     for the object file; a corrupt one is quarantined).
//
// MemoAhead.BuildUnplanned serves a build without even a graph: when the build that wrote the memo
// was given BuildOptions.Plan — the caller's digest of everything the graph is planned from but the
// files it reads (build.Target.PlanKey: the recipe, its overrides and path, GOMAXPROCS) — the memo
// also holds the plan key (the BLAKE3 of the executable's digest, its numerics, the budget, the
// target and that digest) and every source file of the graph with its digest. The memo key's check
// is then replaced by two: the plan key matches the one computed from the caller's digest now, and
// every source file still has its digest (stat cache); the other checks are the same. The graph is
// a function of the planner's code and of these, which is the caller's contract (build.Target.PlanKey).
//
// Otherwise it is a miss and the build is planned and run as usual (and writes a new memo). A hit
// records the use of the build's objects for GC (Store.MarkUsed: their access markers) only when
// the memo's mtime — when it last did so, or when it was written — is 10 minutes old or more, and
// then sets that mtime to now: GC sees the objects of a rebuild repeated within 10 minutes used
// up to 10 minutes early, and a no-op rebuild does not rewrite hundreds of markers. The file is
// binary; integers are unsigned LEB128 varints in their shortest form, strings and byte fields a
// varint length and the bytes, digests 32 raw bytes:
//
//	"ORKMEMO3"  body length (uint64 little-endian)  body  BLAKE3-256 of the body (32 bytes)  records
//	body:    memo key, plan flag (0 or 1) [plan key], node count, nodes, export count, exports,
//	         tool count, tools, source count, sources, records length, records BLAKE3
//	node:    id, stage, node key, same-as node id ("" if none), declared memory,
//	         dependency count, dependency indices (each below the node's own index),
//	         output count, outputs (name, digest, size)
//	export:  name, node index, output name
//	tool:    path, digest
//	source:  path, digest
//	records: the build record's node list (every node's RecordedNode JSON, outcome cached,
//	         comma-separated, without brackets): five sixths of the file for the bench's 27B graph
//
// A hit reads the head (everything before the records; the file's size must be the head's and the
// records' lengths) and copies the records into its build record, checking their BLAKE3 as it
// goes: records damaged since (they decide nothing about the build) leave no record, and the memo
// is removed with a warning. A memo whose magic is "ORKMEMO" and another version (another
// orkpipe's) is a miss, silently.
// A memo is verified on read — magic, length, checksum, then every field (counts within the bytes
// left, indices in range, no zero digest, no trailing bytes); one that fails is a miss, logged as a
// warning, never trusted. It is written to a temp file and renamed, without fsync: a torn memo
// fails its checksum.
package engine
