package store

import (
	"testing"

	"orkpipe/internal/crosstest"
	"orkpipe/internal/testfiles"
)

// suites are the tests of what the board host's pull and verify run beyond the library
// (internal/arm64host/ork): the store's hashes and ingest, verify's checks, and pulls against a real
// registry (ranges in parallel and out of order, holes, attestations, a pull killed three times that
// resumes). Left out: registry's TestSignedPull (22 s emulated: its refusals are the same Go on both
// machines, and internal/arm64host/binary's TestBoardHostBinary pulls a signed artifact with --trust
// and signs an attestation on the board's binary), and the build side's tests of these packages.
var suites = []crosstest.Suite{
	{Pkg: "artifacts", Tests: []string{"TestParallelHashMatchesSerial", "TestParallelHashHoles", "TestHashSmall",
		"TestHashFileCachesByStat", "TestHashFileRsyncCase", "TestHashFileErrors", "TestStreamHasher",
		"TestIngestRoundTrip", "TestFlippedByteQuarantined", "TestAdoptDigsHoles", "TestVerifyRemembered"}},
	{Pkg: "pipelines/verify", Tests: []string{"TestVerifyDirGood", "TestVerifyNotABuildDir", "TestVerifyCorruptEntry",
		"TestVerifyStubZeroedNonOwned", "TestVerifyDoesNotFit", "TestVerifyLoaderCoverage", "TestVerifyRunStandIns",
		"TestVerifyFingerprintRunBinary"}},
	{Pkg: "registry", Tests: []string{"TestPullParallelRanges", "TestPullSwappedRanges", "TestEmptyAndHoleOnlyFiles",
		"TestParseManifestRefuses", "TestAttachBoardVerification", "TestPullResumeAfterKill"}},
}

// TestBoardHostStore runs suites built for linux/arm64 (CGO_ENABLED=0, as the board's binary is
// built) under qemu-aarch64, with -test.short; each named test must run and pass.
func TestBoardHostStore(t *testing.T) {
	if testing.Short() {
		testfiles.SkipShort(t, "-short: the board host's store, verify and pull tests built for linux/arm64 (minutes under emulation)")
	}
	crosstest.RunBoardHost(t, suites)
}
