// Package artifacts is orkpipe's content-addressed store (CAS): immutable objects named by their
// BLAKE3-256 digest, the action cache (node key -> outputs + provenance), the stat cache for user
// files named by path, process-safe per-key locks, materializing objects into user directories
// without clobbering, pins and least-recently-used garbage collection.
//
// # On-disk layout (format version 1)
//
// Everything lives under one directory (the cache dir, default os.UserCacheDir()/orkpipe):
//
//	<dir>/
//	  LAYOUT                       "orkpipe-store 1\n"; OpenStore refuses any other content
//	  store.lock                   every open Store holds flock(LOCK_SH) on it; GC upgrades to LOCK_EX
//	  objects/<h0h1>/<64 hex>      object bytes, mode 0444, named by the BLAKE3 of their logical
//	                               bytes (file holes hash as zeros); never overwritten, never modified
//	  access/<h0h1>/<64 hex>       empty marker; its mtime is the object's last use (for LRU GC;
//	                               atime is not relied upon): set by Stat, Open and MarkUsed, not
//	                               by Present (the build memo marks its objects at most every 10
//	                               minutes, pipelines/engine)
//	  digests/<h0h1>/<64 hex>      the object's sha256 and BLAKE3 piece values (ObjectDigests),
//	                               remembered the first time Digests is asked, so that a push
//	                               hashes an object once; checksummed (digests.go); removed with
//	                               the object (GC, quarantine)
//	  quarantine/<64 hex>.<unix ns>  objects whose bytes no longer match their name, moved aside
//	  quarantine/action-<64 hex>.<unix ns>.json  action records that were not a valid record of
//	                               their key (damaged on disk), moved aside by GetAction or GC
//	  actions/<h0h1>/<64 hex>.json action record of a node key (JSON, see ActionRecord)
//	  pins/<64 hex>.json           outputs of the most recent build of a target name (see Pin), and
//	                               when they were first pinned; the file name is the BLAKE3 of the
//	                               name, which is stored inside
//	  stat/<h0h1>/<64 hex>.json    stat-cache entry of a user path; the file name is the BLAKE3 of the
//	                               absolute path; content is (path, dev, inode, size, mtime ns,
//	                               ctime ns, digest)
//	  journal/<h0h1>/<64 hex>.json what Materialize wrote at a user path (same naming as stat/):
//	                               path, digest, dev, inode, size, mtime ns, ctime ns, time
//	  locks/<h0h1>/<64 hex>.lock   flock files of LockKey, one per node key; deleted only by GC,
//	                               which has the store to itself (no process can hold one)
//	  tmp/<id>.lock                a live Store holds flock(LOCK_EX) on its session lock ...
//	  tmp/<id>/                    ... and writes every temp file and TempDir inside its session
//	                               dir. A session whose lock can be taken belongs to a dead
//	                               process; OpenStore and GC remove it.
//	  history/                     owned by the DAG engine (pipelines/engine): the key material of
//	                               each build per target, read by `orkpipe explain`; beside it,
//	                               the costs of the target's node kinds (pipelines/progress)
//	  uploads/<64 hex>.json        owned by registry push (registry/oci WithUploadState): one chunked
//	                               upload session per registry, repository and blob (its upload
//	                               Location, no credentials), so that a killed push resumes it;
//	                               removed when the blob is complete or the session refused, after
//	                               7 days, and beyond 256 sessions
//	  uploads/<64 hex>.lock        flock(LOCK_EX)ed by the push uploading that blob (another one
//	                               waits) and removed by it; one a dead process left is taken over
//	                               by the next push of the blob, or removed, an hour old, by a
//	                               push starting an upload
//
// # Invariants
//
// An object file appears under objects/ only complete: it is written to a temp file in tmp/ (same
// filesystem), hashed while streaming, fsynced, its size checked against the bytes written, made
// 0444 and then link(2)ed to its final name. EEXIST means another writer won the race with the
// same bytes; the existing object is kept and the temp file removed. The directory is fsynced
// after the link. A process killed at any point leaves at most a session dir in tmp/ (and, from
// the few records written without a session, small temp files GC removes: pruneStaleTemps).
// Materialize's temp file in a user's directory is locked while written; a killed writer's is
// removed by the next Materialize or CreateTemp into that directory (sweepTemps). Replacing a file
// there, Materialize swaps names in one step and checks what it took out (swapIn), so a file that
// reached the destination after it looked is put back, never lost.
//
// Reads verify: Open returns a reader that hashes while streaming and fails at EOF (wrapping
// ErrCorrupt) if the bytes or their count differ from the name. Verify and VerifyAll re-hash,
// except that Verify (and HashFile of an object file) skips an object this Store adopted in this
// process while its file keeps the identity it had after the commit (a node output read by the
// next node moments after it was hashed; see rememberVerified and HashedFile). A
// corrupt object is moved to quarantine/, logged with slog at warning level with its digest and
// path, and is missing from then on, so the action records that reference it become misses and
// their producers re-run. An action record file that does not decode, fails validation or names
// another key is treated the same way: GetAction moves it to quarantine/, logs a warning naming the
// key, the record and where it went, and fails with ErrInvalidRecord; the next lookup is a miss.
//
// Read-only: OpenStoreReadOnly opens a store this process cannot write (a read-only mount, another
// user's cache) for reading only. It takes the shared lock on store.lock through a read-only
// descriptor (flock needs no write access, and GC still excludes it), starts no session and writes
// nothing: use times, stat-cache entries and digests records are not recorded, corrupt objects and
// invalid records are reported but not moved, and every method that writes fails with ErrReadOnly
// naming the directory.
//
// Hashing a file (HashFile, Verify, AdoptFile, IngestFile) runs on all CPUs for files above
// 4 MiB: each 4 MiB piece is a complete subtree of the BLAKE3 tree, mapped read-only (mmap, no copy
// out of the page cache, populated with one MADV_POPULATE_READ) and hashed by its own worker; the
// subtree chaining values are merged in order (tree.go). On amd64 with AVX-512 a piece is hashed
// by orkpipe's own assembly (internal/blake3x, derived from lukechampine.com/blake3's, shared with
// ork/pack): 16 chunks at once, message words loaded with plain loads and a register transpose
// instead of gathers, the next group prefetched, and the tree above the chunks merged 16 parents
// at once; elsewhere by lukechampine.com/blake3/guts (AVX2 or Go). A piece that lies in a file
// hole is hashed as zeros from memory, never read. A file that shrinks while mapped raises
// SIGBUS, which is recovered as an error. The digest is the standard BLAKE3-256 that b3sum prints.
// Memory: per worker (GOMAXPROCS) one 4 MiB mapping of page cache and 128 KiB of chaining values;
// per file 32 bytes per 4 MiB piece. A file of at most 4 MiB is read in 256 KiB blocks on the
// caller's goroutine (no read-ahead buffers) and hashed by blake3x's streaming Hasher, as SumBytes
// hashes memory. Streaming hashes (Ingest from a reader, Open) use zeebo/blake3; NewStreamHasher
// uses the piece code on a 4 MiB buffer.
//
// IngestFile and Materialize-by-copy have the kernel copy the bytes: a FICLONE reflink where the
// filesystem shares extents, after which the source is hashed on all CPUs; else copy_file_range of
// each data segment (holes stay holes) on one goroutine while the source is hashed on the other
// CPUs: one read for the hash, one kernel copy, no user-space copy. The
// source's size, mtime and ctime are compared before and after, so the copy holds the hashed bytes.
// Materialize by hard link does not re-hash: the object was verified when stored and is 0444.
//
// Sparse objects: all-zero runs are stored as holes wherever the store writes the bytes itself or
// adopts them. Ingest and IngestExpect (downloads) leave 64 KiB all-zero spans (holeSpan)
// unwritten; AdoptFile (every node output, from any executor) punches every all-zero filesystem
// block into the file before hashing it, as `cp --sparse=always` would, so a stub exported fully
// allocated by a Dagger engine occupies exactly the blocks of one written locally; IngestFile and
// Materialize-by-copy keep the source's holes. Holes never change an object's bytes or digest.
//
// Concurrency: any number of Stores (goroutines, processes; read-only ones too) may use one directory
// at once, except GC, which takes store.lock exclusively and fails with ErrBusy while another Store
// is open.
// LockKey serialises the execution of one node key across processes.
//
// Digests records: OCI names blobs by sha256, which the store does not use. Digests computes it
// (with the BLAKE3 piece values) in one read of the object that also checks the object's name, and
// remembers it. What guards a remembered sha256: it is only ever computed from bytes that matched
// the name in the same read; the record is keyed by the content (never stale: the same name means
// the same bytes), written atomically and checksummed, and its piece values must merge into the
// name on every read; a registry verifies the sha256 of every blob uploaded. A record is trusted
// as the stat cache is: by whoever may write the store.
//
// Small records (actions, pins, stat and journal entries, digests) are written to a temp file, fsynced and
// renamed over the old one, so concurrent processes see either the old or the new record.
package artifacts
