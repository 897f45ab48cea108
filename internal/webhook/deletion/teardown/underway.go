package teardown

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"
)

// UnderwayFor is how long an item of a teardown tells that the teardown
// is under way: kcp sends the items again, with its own backoff, for as
// long as some are refused.
const UnderwayFor = 2 * time.Minute

// underwayKey is a resource in a namespace ("" for a cluster-scoped one)
// of a workspace.
type underwayKey struct {
	cluster   logicalcluster.Name
	namespace string
	resource  schema.GroupResource
}

// Underway remembers which objects kcp's teardowns were deleting lately.
// Each of kcp's teardowns (a namespace's, a workspace's, an APIBinding's
// deletion) sends a DeleteCollection of every object of a resource in a
// namespace, so one item tells that every object of its resource in its
// namespace is about to go. It needs no events claim: the item itself
// says so. It is safe for concurrent use, and it holds an entry per
// resource and namespace seen within UnderwayFor.
type Underway struct {
	lock  sync.Mutex
	now   func() time.Time
	seen  map[underwayKey]time.Time
	swept time.Time
}

// NewUnderway returns an Underway that has seen no teardown.
func NewUnderway() *Underway {
	return &Underway{now: time.Now, seen: map[underwayKey]time.Time{}}
}

// Saw notes an item of a teardown: an object of resource in namespace of
// cluster.
func (u *Underway) Saw(cluster logicalcluster.Name, namespace string, resource schema.GroupResource) {
	now := u.now()
	u.lock.Lock()
	defer u.lock.Unlock()
	u.seen[underwayKey{cluster, namespace, resource}] = now
	if now.Sub(u.swept) < UnderwayFor {
		return
	}
	u.swept = now
	for k, at := range u.seen {
		if now.Sub(at) >= UnderwayFor {
			delete(u.seen, k)
		}
	}
}

// Deleting reports whether a teardown sent an item of resource in
// namespace of cluster within UnderwayFor: kcp is deleting every object
// of it there.
func (u *Underway) Deleting(cluster logicalcluster.Name, namespace string, resource schema.GroupResource) bool {
	now := u.now()
	u.lock.Lock()
	defer u.lock.Unlock()
	at, ok := u.seen[underwayKey{cluster, namespace, resource}]
	return ok && now.Sub(at) < UnderwayFor
}
