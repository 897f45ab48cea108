package teardown

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/cache"

	"github.com/kcp-dev/logicalcluster/v3"
)

// UnderwayFor is how long an item of a teardown tells that the teardown
// is under way: kcp sends the items again, with its own backoff, for as
// long as some are refused.
const UnderwayFor = 2 * time.Minute

// underwayMax bounds how many resources in namespaces Underway remembers;
// past it, the least recently seen are forgotten first (their objects may
// then be cleared, which is only a wasted write).
const underwayMax = 10000

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
// says so. It is safe for concurrent use, and it holds at most
// underwayMax entries, each for UnderwayFor after its last item.
type Underway struct {
	seen *cache.LRUExpireCache
}

// NewUnderway returns an Underway that has seen no teardown.
func NewUnderway() *Underway {
	return newUnderway(nil)
}

// newUnderway returns an Underway that reads the time from clock (the
// system's if nil).
func newUnderway(clock cache.Clock) *Underway {
	if clock == nil {
		return &Underway{seen: cache.NewLRUExpireCache(underwayMax)}
	}
	return &Underway{seen: cache.NewLRUExpireCacheWithClock(underwayMax, clock)}
}

// Saw notes an item of a teardown: an object of resource in namespace of
// cluster.
func (u *Underway) Saw(cluster logicalcluster.Name, namespace string, resource schema.GroupResource) {
	// The cache keeps an entry up to and including its expiry; it ends
	// UnderwayFor after the item.
	u.seen.Add(underwayKey{cluster, namespace, resource}, struct{}{}, UnderwayFor-time.Nanosecond)
}

// Deleting reports whether a teardown sent an item of resource in
// namespace of cluster within UnderwayFor: kcp is deleting every object
// of it there.
func (u *Underway) Deleting(cluster logicalcluster.Name, namespace string, resource schema.GroupResource) bool {
	_, ok := u.seen.Get(underwayKey{cluster, namespace, resource})
	return ok
}
