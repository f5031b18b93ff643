package executortest_test

import (
	"testing"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/pipelines/engine/executortest"
)

func TestLocalConforms(t *testing.T) {
	executortest.Run(t, func(t *testing.T, store *artifacts.Store, beforeIngest func(string) error) engine.Executor {
		return engine.Local{Store: store, BeforeIngest: beforeIngest}
	})
}
