package teardown

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"

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
	clock cache.Clock
	// lock makes a teardown's first item the one whose time is kept.
	lock sync.Mutex
	// seen holds when the first item of each teardown under way came.
	seen *cache.LRUExpireCache
}

// NewUnderway returns an Underway that has seen no teardown.
func NewUnderway() *Underway {
	return newUnderway(nil)
}

// newUnderway returns an Underway that reads the time from clock (the
// system's if nil).
func newUnderway(c cache.Clock) *Underway {
	if c == nil {
		c = clock.RealClock{}
	}
	return &Underway{clock: c, seen: cache.NewLRUExpireCacheWithClock(underwayMax, c)}
}

// Saw notes an item of a teardown: an object of resource in namespace of
// cluster. It returns when the first item of the teardown came (this one,
// or one seen before within UnderwayFor of the next): the teardown had
// begun by then, whichever item of it is asked about, however long kcp
// backs off between them.
func (u *Underway) Saw(cluster logicalcluster.Name, namespace string, resource schema.GroupResource) (begun time.Time) {
	k := underwayKey{cluster, namespace, resource}
	u.lock.Lock()
	defer u.lock.Unlock()
	begun = u.clock.Now()
	if first, ok := u.seen.Get(k); ok {
		begun = first.(time.Time)
	}
	// The cache keeps an entry up to and including its expiry; it ends
	// UnderwayFor after the item.
	u.seen.Add(k, begun, UnderwayFor-time.Nanosecond)
	return begun
}

// Deleting reports whether a teardown sent an item of resource in
// namespace of cluster within UnderwayFor: kcp is deleting every object
// of it there.
func (u *Underway) Deleting(cluster logicalcluster.Name, namespace string, resource schema.GroupResource) bool {
	_, ok := u.seen.Get(underwayKey{cluster, namespace, resource})
	return ok
}
