package index

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// defaultReadTimeout bounds one live read of a scope unless
// Options.ReadTimeout is set. Each caller of Confirm also stops
// waiting when its own context is done.
const defaultReadTimeout = 30 * time.Second

// scopeKey is a scope read live: the dependents of a source in one logical
// cluster, in one namespace or (namespace empty) in all of them.
type scopeKey struct {
	src       Source
	cluster   logicalcluster.Name
	namespace string
}

// liveRead is one consistent LIST of a scope, shared by every Confirm call
// that joined it before it started, each looking for its own name.
type liveRead struct {
	// names and paths are what the joined calls look for; they do not
	// change once the read has started.
	names map[string]struct{}
	paths []fieldpath.Path
	done  chan struct{}

	// The outcome, valid once done is closed: the dependents that hold one
	// of names at one of paths, and how many dependents were read.
	found   []liveHit
	scanned int
	err     error
}

// liveHit is a dependent that a live read found holding value at
// paths[path] of its liveRead.
type liveHit struct {
	dep   Dependent
	path  int
	value string
}

// scopeReads are the live reads of one scope: at most one in flight and
// one waiting to start.
type scopeReads struct {
	running bool
	next    *liveRead
}

// Confirm reads the dependents of src in cluster live, in namespace if it is
// not empty, through the virtual workspace of the shard that serves the
// cluster, and returns those that hold name at one of paths, with how many
// dependents it read. A cluster that does not bind the export has none.
//
// The read is a consistent LIST, made after Confirm was called, so it sees
// every dependent whose create returned before that. Calls for the same
// scope that arrive while a read of it is in flight share the next read,
// which starts once the current one has finished: a burst of deletes in one
// namespace costs two reads, not one per delete, and no call relies on a
// read that started before it.
//
// It returns an error wrapping ErrVersionNotServed if the export does not
// serve the version the rules name, and any error from reading.
func (ix *Index) Confirm(ctx context.Context, src Source, paths []fieldpath.Path, cluster logicalcluster.Name, namespace, name string) ([]Dependent, int, error) {
	r := ix.joinRead(scopeKey{src: src, cluster: cluster, namespace: namespace}, paths, name)
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("reading %s in %s live: %w", src, cluster, ctx.Err())
	}
	if r.err != nil {
		return nil, r.scanned, r.err
	}
	var hits []Dependent
	for _, h := range r.found {
		if h.value == name && slices.Contains(paths, r.paths[h.path]) && !slices.ContainsFunc(hits, func(d Dependent) bool { return d == h.dep }) {
			hits = append(hits, h.dep)
		}
	}
	return hits, r.scanned, nil
}

// joinRead adds name and paths to the read of key that has not started yet,
// creating it if there is none, and starts it unless a read of key is in
// flight (which starts it when it finishes).
func (ix *Index) joinRead(key scopeKey, paths []fieldpath.Path, name string) *liveRead {
	ix.liveLock.Lock()
	defer ix.liveLock.Unlock()
	if ix.live == nil {
		ix.live = map[scopeKey]*scopeReads{}
	}
	sr := ix.live[key]
	if sr == nil {
		sr = &scopeReads{}
		ix.live[key] = sr
	}
	if sr.next == nil {
		sr.next = &liveRead{names: map[string]struct{}{}, done: make(chan struct{})}
	}
	r := sr.next
	r.names[name] = struct{}{}
	for _, p := range paths {
		if !slices.Contains(r.paths, p) {
			r.paths = append(r.paths, p)
		}
	}
	if !sr.running {
		sr.running, sr.next = true, nil
		go ix.runReads(key, sr, r)
	}
	return r
}

// runReads runs r, then the read of key that was joined meanwhile, if any,
// until there is none.
func (ix *Index) runReads(key scopeKey, sr *scopeReads, r *liveRead) {
	for r != nil {
		ix.read(key, r)
		close(r.done)
		ix.liveLock.Lock()
		r, sr.next = sr.next, nil
		if r == nil {
			sr.running = false
			delete(ix.live, key)
		}
		ix.liveLock.Unlock()
	}
}

// read lists the scope of key and records in r the dependents that hold one
// of r's names at one of r's paths. A panic while reading fails the read
// (and so the decisions waiting for it), not the webhook.
func (ix *Index) read(key scopeKey, r *liveRead) {
	defer func() {
		if p := recover(); p != nil {
			r.err = fmt.Errorf("reading %s in %s live panicked: %v", key.src, key.cluster, p)
		}
	}()
	ix.lock.Lock()
	parent := ix.ctx
	ix.lock.Unlock()
	if parent == nil {
		parent = context.Background()
	}
	timeout := ix.opts.ReadTimeout
	if timeout <= 0 {
		timeout = defaultReadTimeout
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	path := resourcePath(key.cluster.Path(), key.src.Resource, key.namespace)
	r.err = ix.onShardOf(key.src, key.cluster, func(rd *reader, state State) error {
		r.found, r.scanned = r.found[:0], 0
		_, err := rd.list(ctx, path, nil, func(item []byte) error {
			r.scanned++
			return r.match(item, key.cluster)
		})
		switch {
		case err == nil && state.Phase == PhaseVersionNotServed:
			return fmt.Errorf("%w: %s", ErrVersionNotServed, state.Message)
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: %s: %w", ErrVersionNotServed, state.Message, err)
		}
		return err
	})
}

// match records the dependent item if it holds one of r's names at one of
// r's paths. Only the paths are read of a dependent that holds none.
func (r *liveRead) match(item []byte, cluster logicalcluster.Name) error {
	var found []liveHit
	for i, p := range r.paths {
		err := p.EachJSON(item, func(v string) bool {
			if _, ok := r.names[v]; ok {
				found = append(found, liveHit{path: i, value: v})
			}
			return true
		})
		if err != nil {
			return fmt.Errorf("failed to read %s: %w", p, err)
		}
	}
	if len(found) == 0 {
		return nil
	}
	o, err := decodeObject(item, nil)
	if err != nil {
		return err
	}
	if o.Cluster.Empty() {
		o.Cluster = cluster
	}
	dep := Dependent{Cluster: o.Cluster, Namespace: o.Namespace, Name: o.Name, UID: o.UID, Terminating: o.DeletionTimestamp != nil}
	for _, h := range found {
		h.dep = dep
		r.found = append(r.found, h)
	}
	return nil
}
