package index

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index/live"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// A teardown is decided from the index once the index has caught up with
// a fence: the resourceVersion of the scope, read once the teardown had
// begun. A fence is taken anew after fenceTTL, so that a dependent the
// index has not seen can be at most that old; the first item of a fence
// waits up to fenceWait for the watch to pass it.
const (
	fenceTTL  = 10 * time.Second
	fenceWait = 100 * time.Millisecond
)

// fence is the resourceVersion of a scope at a moment a teardown was under
// way.
type fence struct {
	rv uint64
	at time.Time
}

// Fenced reports whether the index holds every dependent of the query's
// source in its scope (see Confirm) that existed before the current fence
// of the scope was taken: the fence is the scope's resourceVersion, read
// with a consistent LIST of at most one object on the first call for the
// scope and again once it is fenceTTL old, and the index holds those
// dependents once the reflector of the shard that serves the cluster has
// stored everything up to it. Called for the items of a teardown, which
// kcp sends only once the teardown has begun, it proves that no dependent
// that existed before the teardown began is missing from the index, at the
// cost of one small read per scope every fenceTTL rather than one per item.
//
// It returns false (and the caller reads live) while the source is not
// synced, does not index every path of the query, the shard is not known,
// or the reflector has not passed the fence: a broken watch never passes
// it, an idle one only with its next bookmark (every WatchTimeout or so).
func (ix *Index) Fenced(ctx context.Context, q Query) (bool, error) {
	w := ix.watch(q.Source)
	if w == nil || w.State().Phase != PhaseSynced {
		return false, nil
	}
	indexed := w.Paths()
	if slices.ContainsFunc(q.Paths, func(p fieldpath.Reference) bool { return !slices.Contains(indexed, p) }) {
		return false, nil
	}
	shard, known := w.Serving(q.Cluster)
	if !known {
		return false, nil
	}
	scope := ix.scope(q)
	f, fresh, err := ix.fence(ctx, scope, shard)
	if err != nil {
		return false, err
	}
	st := w.Store()
	if rv, _, ok := st.Progress(shard); ok && rv >= f.rv {
		return true, nil
	}
	if !fresh {
		return false, nil
	}
	wctx, cancel := context.WithTimeout(ctx, fenceWait)
	defer cancel()
	return st.WaitProgress(wctx, shard, f.rv), nil
}

// fence returns the current fence of scope, taking a new one on shard if
// there is none or it is fenceTTL old; fresh is set if it was taken by this
// call. Concurrent calls for one scope take one fence: the first takes it,
// the others wait for it.
func (ix *Index) fence(ctx context.Context, scope live.Scope, shard string) (fence, bool, error) {
	for {
		now := ix.now()
		ix.lock.Lock()
		for s, old := range ix.fences {
			if now.Sub(old.at) >= fenceTTL {
				delete(ix.fences, s)
			}
		}
		if f, ok := ix.fences[scope]; ok {
			ix.lock.Unlock()
			return f, false, nil
		}
		taking, busy := ix.fencing[scope]
		if !busy {
			taking = make(chan struct{})
			ix.fencing[scope] = taking
		}
		ix.lock.Unlock()
		if !busy {
			f, err := ix.takeFence(ctx, scope, shard, now)
			ix.lock.Lock()
			delete(ix.fencing, scope)
			if err == nil {
				ix.fences[scope] = f
			}
			ix.lock.Unlock()
			close(taking)
			return f, err == nil, err
		}
		select {
		case <-taking:
		case <-ctx.Done():
			return fence{}, false, ctx.Err()
		}
	}
}

// takeFence reads the resourceVersion of scope on shard.
func (ix *Index) takeFence(ctx context.Context, scope live.Scope, shard string, now time.Time) (fence, error) {
	c, err := ix.clients.For(shard)
	if err != nil {
		return fence{}, err
	}
	version, err := c.List(ctx, vw.ResourcePath(scope.Cluster.Path(), scope.Source.Resource, scope.Namespace), url.Values{"limit": {"1"}}, func([]byte) error { return nil })
	if err != nil {
		return fence{}, fmt.Errorf("failed to read the resourceVersion of %s in %s: %w", scope.Source, scope.Cluster, err)
	}
	rv, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		return fence{}, fmt.Errorf("unexpected resourceVersion %q of %s: %w", version, scope.Source, err)
	}
	return fence{rv: rv, at: now}, nil
}
