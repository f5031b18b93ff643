package executortest_test

import (
	"testing"

	"orkpipe/artifacts"
	"orkpipe/internal/testfiles"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/engine/executortest"
)

func TestLocalConforms(t *testing.T) {
	executortest.Run(t, func(t *testing.T, store *artifacts.Store, beforeIngest func(string) error) engine.Executor {
		return engine.Local{Store: store, BeforeIngest: beforeIngest}
	})
}

// TestLocalPack runs the real pack build through the Local executor and compares it with the
// engine's default executor (ORKPIPE_LONG_TESTS=1: two stories260K builds, about a minute on 2
// cores). The Dagger executor's run is TestDaggerPackMatchesLocal in package daggerexec.
func TestLocalPack(t *testing.T) {
	testfiles.Long(t, "two stories260K W4A8 builds")
	executortest.Pack(t, func(t *testing.T, store *artifacts.Store, beforeIngest func(string) error) engine.Executor {
		return engine.Local{Store: store, BeforeIngest: beforeIngest}
	})
}
