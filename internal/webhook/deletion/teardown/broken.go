package teardown

import (
	"sync"
	"time"
)

// Broken remembers, for a while, the cycles of references a teardown broke:
// the components whose every object, and every object that references one,
// a teardown under way deletes (see docs/architecture.md, "Teardown"), with
// what the caller needs to tell that this still holds (V). Once a
// component is broken, each of its objects may go as soon as only other
// objects of the component reference it, which keeps the component from
// decaying into a chain that kcp's teardown would delete one object per
// pass. Memory is proportional to the objects of the components
// remembered; each is forgotten after the TTL.
type Broken[K comparable, V any] struct {
	lock sync.Mutex
	ttl  time.Duration
	now  func() time.Time
	of   map[K]*component[K, V]
}

type component[K comparable, V any] struct {
	members map[K]struct{}
	value   V
	at      time.Time
}

// NewBroken returns an empty memory that forgets a component ttl after it
// was remembered.
func NewBroken[K comparable, V any](ttl time.Duration) *Broken[K, V] {
	return &Broken[K, V]{ttl: ttl, now: time.Now, of: map[K]*component[K, V]{}}
}

// Remember remembers members as a broken component, with value, and
// forgets what has expired.
func (b *Broken[K, V]) Remember(members []K, value V) {
	now := b.now()
	c := &component[K, V]{members: make(map[K]struct{}, len(members)), value: value, at: now}
	for _, m := range members {
		c.members[m] = struct{}{}
	}
	b.lock.Lock()
	defer b.lock.Unlock()
	for k, old := range b.of {
		if now.Sub(old.at) >= b.ttl {
			delete(b.of, k)
		}
	}
	for _, m := range members {
		b.of[m] = c
	}
}

// Members reports whether k is an object of a broken component that has
// not expired, and returns a test of membership in it and its value.
func (b *Broken[K, V]) Members(k K) (func(K) bool, V, bool) {
	b.lock.Lock()
	defer b.lock.Unlock()
	c, ok := b.of[k]
	if !ok || b.now().Sub(c.at) >= b.ttl {
		var zero V
		return nil, zero, false
	}
	return func(m K) bool {
		_, in := c.members[m]
		return in
	}, c.value, true
}

// Forget forgets the component of k.
func (b *Broken[K, V]) Forget(k K) {
	b.lock.Lock()
	defer b.lock.Unlock()
	c, ok := b.of[k]
	if !ok {
		return
	}
	for m := range c.members {
		if b.of[m] == c {
			delete(b.of, m)
		}
	}
}

// Len returns the number of objects remembered.
func (b *Broken[K, V]) Len() int {
	b.lock.Lock()
	defer b.lock.Unlock()
	return len(b.of)
}
