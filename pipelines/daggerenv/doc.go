// Package daggerenv is what orkpipe knows of a Dagger setup without linking the Dagger SDK: whether
// the SDK's environment names an engine (CheckEnvironment), which dagger CLI it names, the
// static linux/amd64 orkpipe binary the containers run (CheckBinary, SelfBinary, BuildBinary),
// the executor program that links the SDK (cmd/orkpipe-dagger: FindExecutor, BuildExecutor) and the
// engine version all of it is tested against. The orkpipe command imports this package; the SDK
// itself lives in package daggerexec, which only cmd/orkpipe-dagger links.
package daggerenv
