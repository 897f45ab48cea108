package index

import (
	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
)

// Holder is a dependent that holds references; see store.Holder.
type Holder = store.Holder

// Held is a reference a Holder holds; see store.Held.
type Held = store.Held

// Existence tells whether the object named name in namespace (empty for a
// cluster-scoped one) of cluster exists (Has), or one of that name in any
// namespace (Named); *store.Store and *targets.Set implement it.
type Existence interface {
	Has(cluster logicalcluster.Name, namespace, name string) bool
	Named(cluster logicalcluster.Name, name string) bool
}

// WatchTargets turns on or off the watches of the objects of the sources
// that are only inspected (protected types that are no dependent types):
// while on, each keeps the set of its objects, their cluster, namespace and
// name only, read through its APIExport's virtual workspace with the grant
// its reads need. The audit of dangling references turns them on in the
// replica that runs it.
func (ix *Index) WatchTargets(on bool) {
	ix.lock.Lock()
	ix.watchTargets = on
	watches := make([]watch, 0, len(ix.watches))
	for _, w := range ix.watches {
		watches = append(watches, w.watch)
	}
	ix.lock.Unlock()
	for _, w := range watches {
		w.SetWatchTargets(on)
	}
}

// Existing returns what tells whether objects of src exist, and whether it
// knows every object kcp stored of src a moment ago: the store of an
// indexed source, while it is Synced; the set of targets of a source that
// is only inspected, once every shard has listed and while no watch is
// broken (see WatchTargets). nil, false for a source not watched.
func (ix *Index) Existing(src Source) (Existence, bool) {
	w := ix.watch(src)
	if w == nil {
		return nil, false
	}
	if len(w.Paths()) > 0 {
		return w.Store(), w.State().Phase == PhaseSynced
	}
	set, ok := w.Targets()
	if set == nil {
		return nil, false
	}
	return set, ok
}

// Holders calls fn with every indexed dependent of src that holds a
// reference and is not being deleted, and the paths of src, into which its
// references' Path indexes (see store.Each); false, calling nothing, for a
// source that is not indexed.
func (ix *Index) Holders(src Source, fn func(paths []fieldpath.Reference, h *Holder)) bool {
	w := ix.watch(src)
	if w == nil || len(w.Paths()) == 0 {
		return false
	}
	paths := w.Paths()
	w.Store().Each(func(h *Holder) { fn(paths, h) })
	return true
}

// Contents receives a value whenever indexed dependents or the objects in
// a set of targets may have changed; values are coalesced. It has one
// receiver (the audit of dangling references).
func (ix *Index) Contents() <-chan struct{} {
	return ix.contents
}

// Generation grows with every change of the indexed dependents (added,
// updated, removed, or listed again) and, while they are watched
// (WatchTargets), with every object of a protected type that may have
// appeared (one added, or a shard listed). Equal values mean none of these
// happened in between; an object of a protected type that went does not
// count, for it can make no object clearable.
func (ix *Index) Generation() uint64 {
	return ix.changes.generation.Load()
}
