package verify_test

import (
	"context"

	"orkpipe/ork/gguf"
)

func ggufOpen(path string) (*gguf.File, error) { return gguf.Open(context.Background(), path) }
