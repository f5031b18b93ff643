// Package nodeexec runs one build node from its key material alone, the way `orkpipe node exec`
// does in a container and the engine's local executor does in process: both call Run, so they
// cannot behave differently. Ingest is the other half: it checks a node's output directory
// against its result record and only then stores the outputs.
//
// # Node directories (format version 1)
//
// A node is executed from three things:
//
//	material.json          the node's key material, canonical JSON (stages.KeyMaterial); its
//	                       BLAKE3 is the node key
//	<in>/<64 hex>          one file per distinct input or tool digest, named by the hex of the
//	                       digest (a regular file or a symlink to one), or a directory of that
//	                       name holding the file as <64 hex>/<64 hex> (the Dagger executor
//	                       mounts one such directory per input), or its tar form as
//	                       <64 hex>/<64 hex>.tar (package artifacts/sparse: one entry named
//	                       <64 hex>, only the data travels; how the Dagger executor sends a
//	                       file with holes), which Run unpacks, holes kept, into a directory of
//	                       its own under the scratch directory (WithScratch) and removes when
//	                       it returns; nothing else is read
//	<out>/                 absent or empty; Run creates it
//
// and leaves in <out>:
//
//	<out>/outputs/<name>   one regular file per declared output of the stage, nothing else
//	<out>/result.json      the result record (Result), written last: {"format":"orkpipe-node-
//	                       result 1","key":"blake3:…","stage":…,"version":…,"outputs":[{"name",
//	                       "digest","size"}…] in spec order,"host":…,"start":…,"end":…,
//	                       "orkpipe":{"version","revision","dirty","binary"}}
//
// A run that fails writes no result record. Ingest refuses a directory whose record is missing,
// malformed, for another key, stage or version, names other outputs than the stage declares, or
// whose files differ from the record in presence, type, size or digest; nothing is stored then
// (with WithPrecheck) or nothing the engine would reference (without it, an adopted object whose
// digest disagrees is left unreferenced in the CAS and the error is returned).
package nodeexec
