// Package live reads the dependents of one scope (a source in one logical
// cluster, in one namespace or all of them) with a consistent LIST, for
// the decisions the index cannot take from what it has indexed. Decisions
// that need the same scope while a read of it is in flight share the next
// read, which starts once the current one has finished: a burst of deletes
// in one namespace costs two reads, not one per delete, and no decision
// relies on a read that started before it asked. A read can be answered
// without listing (see CatchUpFunc): the index, once it has caught up with
// the scope's current resourceVersion, holds what the LIST would return.
package live

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index/sources"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// DefaultTimeout bounds one read unless New is given another bound.
const DefaultTimeout = 30 * time.Second

// Scope is what one read lists: the objects of a source in one logical
// cluster, in one namespace or (Namespace empty) in all of them, and, if
// Selector is set, only those that match it.
type Scope struct {
	Source    sources.Source
	Cluster   logicalcluster.Name
	Namespace string
	// Selector is a label selector (see package reflabels); empty: every
	// object.
	Selector string
}

// ReadFunc lists the objects of a scope with a consistent read and calls
// visit with the raw JSON of each; the slice is only valid during the call.
// It returns how the read ended; visit's errors end it too.
type ReadFunc func(ctx context.Context, scope Scope, visit func(item []byte) error) error

// Answer returns the dependents that reference the object named name in
// namespace at one of paths, as found by a read (see CatchUpFunc).
type Answer func(paths []fieldpath.Reference, namespace, name string) []kcp.Meta

// CatchUpFunc answers in place of a read of a scope: it returns how to find
// the dependents of the scope as a consistent LIST started now would see
// them, or nil (and the scope is listed). An error is not a decision's: the
// scope is listed.
type CatchUpFunc func(ctx context.Context, scope Scope, paths []fieldpath.Reference) (Answer, error)

// Reads are the live reads of all scopes.
type Reads struct {
	read    ReadFunc
	catchUp CatchUpFunc
	timeout time.Duration

	lock   sync.Mutex
	scopes map[Scope]*scopeReads
}

// New returns Reads that read with read, each read bounded by timeout
// (DefaultTimeout if not positive): no decision waits for a read longer
// than it may wait itself, so this only ends reads nobody waits for.
//
// If catchUp is set, each read first asks it, and lists the scope only if
// it cannot answer.
func New(read ReadFunc, catchUp CatchUpFunc, timeout time.Duration) *Reads {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Reads{read: read, catchUp: catchUp, timeout: timeout, scopes: map[Scope]*scopeReads{}}
}

// scopeReads are the reads of one scope: at most one in flight and one
// waiting to start.
type scopeReads struct {
	running bool
	next    *read
}

// read is one consistent LIST of a scope, shared by every Confirm call that
// joined it before it started, each looking for its own name.
type read struct {
	// names and paths are what the joined calls look for; they do not
	// change once the read has started.
	names map[string]struct{}
	paths []fieldpath.Reference
	done  chan struct{}

	// The outcome, valid once done is closed: the dependents that hold one
	// of names at one of paths, and how many dependents were read.
	found   []hit
	scanned int
	err     error
	// answer, if set, answers instead of found: the read was not needed.
	answer Answer
}

// hit is a dependent that a read found holding a reference to value (in
// namespace, if the reference names one) at paths[path] of its read.
type hit struct {
	dep       kcp.Meta
	path      int
	namespace string
	value     string
}

// Confirm reads the scope live and returns the dependents in it that
// reference the object named name in namespace (empty for a cluster-scoped
// object, see fieldpath.RefersTo) at one of paths, with how many dependents
// it read. The read starts
// after Confirm was called, so it sees every dependent whose create returned
// before that. Calls for the same scope that arrive while a read of it is in
// flight share the next read.
func (rs *Reads) Confirm(ctx context.Context, scope Scope, paths []fieldpath.Reference, namespace, name string) ([]kcp.Meta, int, error) {
	r := rs.join(scope, paths, name)
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, 0, fmt.Errorf("reading %s in %s live: %w", scope.Source, scope.Cluster, ctx.Err())
	}
	if r.err != nil {
		return nil, r.scanned, r.err
	}
	if r.answer != nil {
		return r.answer(paths, namespace, name), 0, nil
	}
	var hits []kcp.Meta
	for _, h := range r.found {
		if h.value == name && slices.Contains(paths, r.paths[h.path]) && fieldpath.RefersTo(h.namespace, h.dep.Namespace, namespace) && !slices.Contains(hits, h.dep) {
			hits = append(hits, h.dep)
		}
	}
	return hits, r.scanned, nil
}

// join adds name and paths to the read of scope that has not started yet,
// creating it if there is none, and starts it unless a read of the scope is
// in flight (which starts it when it finishes).
func (rs *Reads) join(scope Scope, paths []fieldpath.Reference, name string) *read {
	rs.lock.Lock()
	defer rs.lock.Unlock()
	sr := rs.scopes[scope]
	if sr == nil {
		sr = &scopeReads{}
		rs.scopes[scope] = sr
	}
	if sr.next == nil {
		sr.next = &read{names: map[string]struct{}{}, done: make(chan struct{})}
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
		go rs.run(scope, sr, r)
	}
	return r
}

// run runs r, then the read of the scope that was joined meanwhile, if any,
// until there is none.
func (rs *Reads) run(scope Scope, sr *scopeReads, r *read) {
	for r != nil {
		rs.list(scope, r)
		close(r.done)
		rs.lock.Lock()
		r, sr.next = sr.next, nil
		if r == nil {
			sr.running = false
			delete(rs.scopes, scope)
		}
		rs.lock.Unlock()
	}
}

// list lists the scope and records in r the dependents that hold one of
// r's names at one of r's paths. A panic while reading fails the read (and
// so the decisions waiting for it), not the process.
func (rs *Reads) list(scope Scope, r *read) {
	defer func() {
		if p := recover(); p != nil {
			r.err = fmt.Errorf("reading %s in %s live panicked: %v", scope.Source, scope.Cluster, p)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), rs.timeout)
	defer cancel()
	if rs.catchUp != nil {
		if answer, err := rs.catchUp(ctx, scope, r.paths); err == nil && answer != nil {
			r.answer = answer
			return
		}
	}
	r.err = rs.read(ctx, scope, func(item []byte) error {
		r.scanned++
		return r.match(item, scope.Cluster)
	})
}

// match records the dependent item if it holds one of r's names at one of
// r's paths. Only the paths are read of a dependent that holds none.
func (r *read) match(item []byte, cluster logicalcluster.Name) error {
	var found []hit
	for i, p := range r.paths {
		err := p.EachJSON(item, func(v fieldpath.Value) bool {
			if _, ok := r.names[v.Name]; ok {
				found = append(found, hit{path: i, namespace: v.Namespace, value: v.Name})
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
	dep, err := kcp.ReadMeta(item)
	if err != nil {
		return err
	}
	if dep.Cluster.Empty() {
		dep.Cluster = cluster
	}
	for _, h := range found {
		h.dep = dep
		r.found = append(r.found, h)
	}
	return nil
}
