// Package remotecache puts a registry-backed remote build cache (cacherepo.Repo) behind the
// engine's store: a local action-cache miss is looked up in the registry repository, and every record
// the engine writes is published there too. Outputs fetched from the registry are verified (sha256 of
// the layer, BLAKE3 and size of the record) before they enter the local store; a corrupt or partial
// download is never used.
//
// A remote miss is a miss. Any other remote failure on a lookup (unreachable registry, refused
// credentials, a digest mismatch) is returned as the registry error, which the engine logs as a warning
// naming the node and the key before it runs the node (the build does not stop, and never uses what
// failed); a failure to publish a record fails the node: the user asked for the remote cache, so
// neither is silent.
package remotecache

import (
	"context"
	"errors"
	"fmt"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/registry/cacherepo"
)

// Store is an engine.Store whose action cache is backed by a remote cache.
type Store struct {
	*artifacts.Store
	remote *cacherepo.Repo
	repo   string
}

var _ engine.Store = (*Store)(nil)

// New wraps local with the remote cache of repository repo.
func New(local *artifacts.Store, remote *cacherepo.Repo, repo string) *Store {
	return &Store{Store: local, remote: remote, repo: repo}
}

// GetAction returns the local record of key, or else the remote one (its outputs downloaded and
// verified into the local store, and the record then kept locally).
func (s *Store) GetAction(ctx context.Context, key artifacts.Digest) (artifacts.ActionRecord, error) {
	rec, err := s.Store.GetAction(ctx, key)
	if err == nil || !errors.Is(err, artifacts.ErrNotFound) {
		return rec, err
	}
	rec, err = s.remote.GetAction(ctx, s.Store, key)
	if err != nil {
		if errors.Is(err, artifacts.ErrNotFound) {
			return artifacts.ActionRecord{}, err
		}
		return artifacts.ActionRecord{}, fmt.Errorf("remote cache %s: node %s: %w", s.repo, key, err)
	}
	if err := s.Store.PutAction(ctx, rec); err != nil {
		return artifacts.ActionRecord{}, fmt.Errorf("recording the remote result of node %s locally: %w", key, err)
	}
	return rec, nil
}

// PutAction records rec locally, then publishes it and its outputs to the remote cache.
func (s *Store) PutAction(ctx context.Context, rec artifacts.ActionRecord) error {
	if err := s.Store.PutAction(ctx, rec); err != nil {
		return err
	}
	if err := s.remote.PutAction(ctx, s.Store, rec); err != nil {
		return fmt.Errorf("remote cache %s: publishing node %s: %w", s.repo, rec.Key, err)
	}
	return nil
}
