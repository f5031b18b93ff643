// Package remotecache puts a registry-backed remote build cache (cacherepo.Repo) behind the
// engine's store: a local action-cache miss (also a damaged local record, which the local store
// quarantines) is looked up in the registry repository, and every record the engine writes is
// published there too. Outputs fetched from the registry are verified (sha256 of the layer, BLAKE3
// and size of the record) before they enter the local store; a corrupt or partial download is never
// used.
//
// A remote miss is a miss. Any other remote failure on a lookup (unreachable registry, refused
// credentials, a digest mismatch) is returned as the registry error, which the engine logs as a warning
// naming the node and the key before it runs the node (the build does not stop, and never uses what
// failed); a failure to publish a record fails the node: the user asked for the remote cache, so
// neither is silent.
//
// # One remote lookup per key
//
// The engine looks a node's key up more than once in one command: Engine.Status (the plan, and
// `orkpipe build`'s space check) and then the build, which looks once before taking the node's job
// slot and key lock and once after. A Store asks the registry once per key: a hit's record is
// remembered (Status peeks with PeekAction, which downloads no output: the build downloads them), and
// once GetAction has downloaded its outputs it is recorded in the local store, so every later look is
// local; a miss or a failure (also of a download) is remembered, and every later look returns it
// without a request — a corrupt blob costs the download attempts of one lookup, not of
// three. What is remembered lasts as long as the Store (the CLI opens one per command), except that
// publishing a key forgets it, and a lookup its context canceled is not remembered. A record
// another machine publishes while this Store lives is therefore not seen by it: open a Store per
// build.
//
// # Repairing a corrupt remote object
//
// When a lookup finds an object's blob corrupt in the registry, the engine runs the node and
// publishes its result; cacherepo.Repo remembers the corrupt blob and publishes that object in a
// salted layer (another digest) instead of the corrupt one, so the next machine is served from the
// remote cache again (docs/oci.md, "Remote build cache").
package remotecache

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"orkpipe/artifacts"
	"orkpipe/pipelines/engine"
	"orkpipe/registry/cacherepo"
)

// Store is an engine.Store whose action cache is backed by a remote cache.
type Store struct {
	*artifacts.Store
	remote *cacherepo.Repo
	repo   string

	mu      sync.Mutex
	lookups map[artifacts.Digest]*lookup // remote lookups running, and those done whose record is not local
}

// lookup is one remote lookup of a key: entry (a hit) or err is set before done is closed.
type lookup struct {
	done  chan struct{}
	entry cacherepo.Entry
	err   error
}

var _ engine.Store = (*Store)(nil)

// New wraps local with the remote cache of repository repo.
func New(local *artifacts.Store, remote *cacherepo.Repo, repo string) *Store {
	return &Store{Store: local, remote: remote, repo: repo, lookups: map[artifacts.Digest]*lookup{}}
}

// GetAction returns the local record of key, or else the remote one (its outputs downloaded and
// verified into the local store, and the record then kept locally). The registry is asked at most
// once per key while the record is not local (see the package doc): a remote miss or failure is
// returned again, as it was, without asking again.
//
// A damaged local record (the local lookup fails with artifacts.ErrInvalidRecord: the store has
// quarantined it, and its next lookup is a plain miss) is a miss for the remote cache: the registry
// is asked, and a hit is served from it. On a remote miss that lookup returns the local error (the
// engine warns about the damaged record once, as without a remote cache); on a remote failure, the
// remote error, which also names the damaged record.
func (s *Store) GetAction(ctx context.Context, key artifacts.Digest) (artifacts.ActionRecord, error) {
	rec, err := s.Store.GetAction(ctx, key)
	if err == nil || !(errors.Is(err, artifacts.ErrNotFound) || errors.Is(err, artifacts.ErrInvalidRecord)) {
		return rec, err
	}
	if !errors.Is(err, artifacts.ErrInvalidRecord) {
		return s.remoteGet(ctx, key)
	}
	damaged := err
	rec, err = s.remoteGet(ctx, key)
	switch {
	case err == nil:
		return rec, nil
	case errors.Is(err, artifacts.ErrNotFound):
		return artifacts.ActionRecord{}, damaged
	default:
		return artifacts.ActionRecord{}, fmt.Errorf("%w (looked up in the remote cache because the local record is damaged: %v)", err, damaged)
	}
}

// PeekAction is GetAction without downloading outputs: the local record (remote false), or else
// the remote one, of which only the manifest and the record are fetched (remote true); the outputs
// are downloaded by a later GetAction of key, which does not ask the registry for the record again.
// Engine.Status uses it, so that planning learns what the remote cache holds without fetching it
// (at 27B, many GiB). A damaged local record is handled as GetAction handles it.
func (s *Store) PeekAction(ctx context.Context, key artifacts.Digest) (rec artifacts.ActionRecord, remote bool, err error) {
	rec, err = s.Store.GetAction(ctx, key)
	if err == nil || !(errors.Is(err, artifacts.ErrNotFound) || errors.Is(err, artifacts.ErrInvalidRecord)) {
		return rec, false, err
	}
	damaged := err
	e, err := s.remoteLookup(ctx, key)
	switch {
	case err == nil:
		return e.Record, true, nil
	case !errors.Is(damaged, artifacts.ErrInvalidRecord):
		return artifacts.ActionRecord{}, false, err
	case errors.Is(err, artifacts.ErrNotFound):
		return artifacts.ActionRecord{}, false, damaged
	default:
		return artifacts.ActionRecord{}, false, fmt.Errorf("%w (looked up in the remote cache because the local record is damaged: %v)", err, damaged)
	}
}

var _ engine.PeekStore = (*Store)(nil)

// remoteGet returns key's record from the remote cache, its outputs downloaded and verified into
// the local store and the record then kept locally; the record is looked up once for this Store's
// callers (remoteLookup). A failed download is remembered as the key's lookup (the package doc,
// "One remote lookup per key").
func (s *Store) remoteGet(ctx context.Context, key artifacts.Digest) (artifacts.ActionRecord, error) {
	e, err := s.remoteLookup(ctx, key)
	if err != nil {
		return artifacts.ActionRecord{}, err
	}
	if err := s.remote.Fetch(ctx, s.Store, e); err != nil {
		err = fmt.Errorf("remote cache %s: node %s: %w", s.repo, key, err)
		if !isCanceled(err) {
			s.remember(key, err)
		}
		return artifacts.ActionRecord{}, err
	}
	if err := s.Store.PutAction(ctx, e.Record); err != nil {
		return artifacts.ActionRecord{}, fmt.Errorf("recording the remote result of node %s locally: %w", key, err)
	}
	s.forget(key) // local now: every later look is local
	return e.Record, nil
}

// remoteLookup returns key's remote entry (its record, no output downloaded) through the lookups
// shared by this Store's callers: the first asks the registry, the others wait for its answer.
// A hit, a miss or a failure is remembered; a lookup its context canceled is forgotten.
func (s *Store) remoteLookup(ctx context.Context, key artifacts.Digest) (cacherepo.Entry, error) {
	for {
		s.mu.Lock()
		l, running := s.lookups[key]
		if !running {
			l = &lookup{done: make(chan struct{})}
			s.lookups[key] = l
		}
		s.mu.Unlock()
		if !running {
			l.entry, l.err = s.remote.Lookup(ctx, key)
			if l.err != nil && !errors.Is(l.err, artifacts.ErrNotFound) {
				l.err = fmt.Errorf("remote cache %s: node %s: %w", s.repo, key, l.err)
			}
			if isCanceled(l.err) {
				s.drop(key, l)
			}
			close(l.done)
			return l.entry, l.err
		}
		select {
		case <-l.done:
		case <-ctx.Done():
			return cacherepo.Entry{}, ctx.Err()
		}
		if !isCanceled(l.err) || ctx.Err() != nil {
			return l.entry, l.err
		}
		// That lookup's context ended, not ours: it was forgotten; look again.
	}
}

// remember replaces key's lookup with the failure err (a download that failed after the record was
// found), which every later look returns.
func (s *Store) remember(key artifacts.Digest, err error) {
	l := &lookup{done: make(chan struct{}), err: err}
	close(l.done)
	s.mu.Lock()
	s.lookups[key] = l
	s.mu.Unlock()
}

// forget drops key's finished lookup (its record is local now, or published).
func (s *Store) forget(key artifacts.Digest) {
	s.mu.Lock()
	if l, ok := s.lookups[key]; ok && isDone(l) {
		delete(s.lookups, key)
	}
	s.mu.Unlock()
}

// drop removes lookup l of key if it is still the key's.
func (s *Store) drop(key artifacts.Digest, l *lookup) {
	s.mu.Lock()
	if s.lookups[key] == l {
		delete(s.lookups, key)
	}
	s.mu.Unlock()
}

func isCanceled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// PutAction records rec locally, then publishes it and its outputs to the remote cache (an output
// whose blob a lookup found corrupt in the registry in a salted layer: cacherepo.Repo.PutAction),
// and forgets what a lookup of rec's key returned.
func (s *Store) PutAction(ctx context.Context, rec artifacts.ActionRecord) error {
	if err := s.Store.PutAction(ctx, rec); err != nil {
		return err
	}
	s.forget(rec.Key)
	if err := s.remote.PutAction(ctx, s.Store, rec); err != nil {
		return fmt.Errorf("remote cache %s: publishing node %s: %w", s.repo, rec.Key, err)
	}
	return nil
}

func isDone(l *lookup) bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}
