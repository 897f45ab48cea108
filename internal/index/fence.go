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
// begun. A fence serves every later item of the teardowns that had begun
// when it was taken, however long kcp backs off between them, and is
// forgotten fenceMemory after it was taken; the first item of a fence
// waits up to fenceWait for the watch to pass it.
const (
	fenceMemory = 2 * time.Minute
	fenceWait   = 100 * time.Millisecond
)

// fence is the resourceVersion of a scope on a shard at a moment a
// teardown was under way.
type fence struct {
	rv    uint64
	at    time.Time
	shard string
}

// fences are the fences of one scope: the newest one, and the newest one
// a call found the index had passed, if that is another. Two are kept so
// that a teardown that begins later, which needs a fence of its own, does
// not hold up the items of one that began before, which an older fence
// the index has passed serves.
type fences struct {
	newest, passed fence
}

// pass notes that the index passed f, if it is later than the fence noted
// as passed.
func (fs *fences) pass(f fence) {
	if f.at.After(fs.passed.at) {
		fs.passed = f
	}
}

// Fenced reports whether the index holds every dependent of the query's
// source in its scope (see Confirm) that existed when a teardown began:
// begun is a moment by which it had begun (when the caller saw its first
// item). The proof is a fence of the scope taken at or after begun: its
// resourceVersion, read with a consistent LIST of at most one object, which
// the reflector of the shard that serves the cluster has passed (stored
// everything up to it). A fence is taken on the first call for the scope
// whose begun is later than every fence kept, and serves every later call
// whose teardown had begun by then: kcp sends a teardown's items again
// and again, with a backoff of up to a minute, and each is decided as soon
// as the index has passed the fence its first item took, at the cost of
// one small read per scope and teardown rather than one per item.
//
// It returns false (and the caller reads live) while the source is not
// synced, does not index every path of the query, the shard is not known,
// or the reflector has not passed the fence: a broken watch never passes
// it, an idle one only with its next bookmark (every WatchTimeout or so).
func (ix *Index) Fenced(ctx context.Context, q Query, begun time.Time) (bool, error) {
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
	st := w.Store()
	passes := func(f fence) bool {
		rv, _, ok := st.Progress(shard)
		return ok && rv >= f.rv
	}
	scope := ix.scope(q)
	f, fresh, err := ix.fence(ctx, scope, shard, begun, passes)
	if err != nil {
		return false, err
	}
	if passes(f) {
		ix.passedFence(scope, f)
		return true, nil
	}
	if !fresh {
		return false, nil
	}
	wctx, cancel := context.WithTimeout(ctx, fenceWait)
	defer cancel()
	if !st.WaitProgress(wctx, shard, f.rv) {
		return false, nil
	}
	ix.passedFence(scope, f)
	return true, nil
}

// fence returns a fence of scope on shard taken at or after begun: one the
// index passes if there is one, else the newest, else a new one; fresh is
// set if it was taken by this call. Concurrent calls for one scope take one
// fence: the first takes it, the others wait for it.
func (ix *Index) fence(ctx context.Context, scope live.Scope, shard string, begun time.Time, passes func(fence) bool) (fence, bool, error) {
	serves := func(f fence) bool { return f.shard == shard && !f.at.Before(begun) }
	for {
		now := ix.now()
		ix.lock.Lock()
		for s, fs := range ix.fences {
			if now.Sub(fs.newest.at) >= fenceMemory {
				delete(ix.fences, s)
			} else if !fs.passed.at.IsZero() && now.Sub(fs.passed.at) >= fenceMemory {
				fs.passed = fence{}
				ix.fences[s] = fs
			}
		}
		fs, ok := ix.fences[scope]
		switch {
		case ok && serves(fs.passed) && passes(fs.passed):
			ix.lock.Unlock()
			return fs.passed, false, nil
		case ok && serves(fs.newest):
			ix.lock.Unlock()
			return fs.newest, false, nil
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
				fs := ix.fences[scope]
				if fs.newest.shard == shard && passes(fs.newest) {
					fs.pass(fs.newest)
				}
				fs.newest = f
				ix.fences[scope] = fs
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

// passedFence notes that the index passed f, a fence of scope.
func (ix *Index) passedFence(scope live.Scope, f fence) {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	if fs, ok := ix.fences[scope]; ok {
		fs.pass(f)
		ix.fences[scope] = fs
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
	return fence{rv: rv, at: now, shard: shard}, nil
}
