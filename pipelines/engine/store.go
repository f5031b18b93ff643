package engine

import (
	"context"

	"orkpipe/artifacts"
)

// Store is what the engine needs of the content-addressed store; *artifacts.Store implements it.
// The engine never writes to the store's directory itself.
type Store interface {
	Dir() string
	HashFile(ctx context.Context, path string) (artifacts.Object, error)
	TempDir(ctx context.Context) (string, error)
	AdoptFile(ctx context.Context, path string) (artifacts.Object, error)
	AdoptHashed(ctx context.Context, path string, h artifacts.HashedFile) (artifacts.Object, error)
	Path(ctx context.Context, d artifacts.Digest) (string, error)
	Verify(ctx context.Context, d artifacts.Digest) error
	GetAction(ctx context.Context, key artifacts.Digest) (artifacts.ActionRecord, error)
	PutAction(ctx context.Context, rec artifacts.ActionRecord) error
	LockKey(ctx context.Context, key artifacts.Digest) (unlock func() error, err error)
	Materialize(ctx context.Context, d artifacts.Digest, dst string, opts artifacts.MaterializeOptions) (artifacts.MaterializeResult, error)
	Pin(ctx context.Context, name string, objs []artifacts.Digest) error
}

var _ Store = (*artifacts.Store)(nil)

// PeekStore is a Store backed by a remote cache (pipelines/remotecache) that can tell a remote hit
// without downloading its outputs. PeekAction returns key's record as GetAction does (the same
// errors), with remote true when the record is only in the remote cache and its outputs are not
// downloaded; a later GetAction of key downloads them. Engine.Status uses it when the store has it.
type PeekStore interface {
	PeekAction(ctx context.Context, key artifacts.Digest) (rec artifacts.ActionRecord, remote bool, err error)
}
