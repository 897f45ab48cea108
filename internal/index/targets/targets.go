// Package targets keeps, for one protected type, which of its objects
// exist: a set of (logical cluster, namespace, name) per shard, fed by one
// reflector per shard that lists and watches the objects through the
// shard's virtual workspace and decodes only their metadata (see package
// sources, which runs the reflectors). Nothing else of an object is kept:
// no UID, no labels, no fields. It answers one question, whether an
// object of that name exists, for the audit of dangling references
// (package audit).
//
// An object costs about 100 bytes, its name included (see
// BenchmarkSetMemory and docs/operations.md, "Dangling references").
package targets

import (
	"fmt"
	"sync"
	"unique"

	"k8s.io/client-go/tools/cache"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index/store"
)

// scope is where an object lives: its logical cluster and namespace (empty
// for a cluster-scoped object). The objects of a namespace share one
// interned scope.
type scope struct {
	cluster   logicalcluster.Name
	namespace string
}

// objKey identifies an object of the set.
type objKey struct {
	scope unique.Handle[scope]
	name  string
}

// nameKey is a name in a logical cluster, in whatever namespace.
type nameKey struct {
	cluster unique.Handle[logicalcluster.Name]
	name    string
}

// shard is what the set holds of one shard: its objects, and how many of
// them have each name in each cluster (for Named).
type shard struct {
	objects map[objKey]struct{}
	names   map[nameKey]int32
}

func newShard(n int) *shard {
	return &shard{objects: make(map[objKey]struct{}, n), names: make(map[nameKey]int32, n)}
}

// add adds an object and reports whether it was new.
func (s *shard) add(o *store.Object) bool {
	k := objKey{scope: unique.Make(scope{cluster: o.Cluster, namespace: o.Namespace}), name: o.Name}
	if _, ok := s.objects[k]; ok {
		return false
	}
	s.objects[k] = struct{}{}
	s.names[nameKey{cluster: unique.Make(o.Cluster), name: k.name}]++
	return true
}

// remove removes an object and reports whether it was there.
func (s *shard) remove(o *store.Object) bool {
	k := objKey{scope: unique.Make(scope{cluster: o.Cluster, namespace: o.Namespace}), name: o.Name}
	if _, ok := s.objects[k]; !ok {
		return false
	}
	delete(s.objects, k)
	nk := nameKey{cluster: unique.Make(o.Cluster), name: o.Name}
	if n := s.names[nk] - 1; n > 0 {
		s.names[nk] = n
	} else {
		delete(s.names, nk)
	}
	return true
}

// Set holds which objects of one protected type exist on every shard that
// its reflectors read. It is safe for concurrent use; lookups take a read
// lock and cost one map access per shard.
type Set struct {
	lock   sync.RWMutex
	shards map[string]*shard
	// changed, if not nil, is called without the lock after an object was
	// added or removed, or a shard listed or dropped.
	changed func()
	// added, if not nil, is called without the lock after an object was
	// added (with its cluster) or a shard listed (with none), before
	// changed.
	added func(cluster logicalcluster.Name)
}

// New returns an empty set that calls changed (if not nil) after every
// change of its contents, and added (if not nil) after every change that
// may have added an object: one added (with its cluster), or a shard
// listed (with none: any cluster).
func New(changed func(), added func(cluster logicalcluster.Name)) *Set {
	return &Set{shards: map[string]*shard{}, changed: changed, added: added}
}

func (s *Set) notifyAdded(cluster logicalcluster.Name) {
	if s.added != nil {
		s.added(cluster)
	}
	s.notify()
}

func (s *Set) notify() {
	if s.changed != nil {
		s.changed()
	}
}

// Has reports whether the object named name in namespace (empty for a
// cluster-scoped object) of cluster exists on some shard.
func (s *Set) Has(cluster logicalcluster.Name, namespace, name string) bool {
	k := objKey{scope: unique.Make(scope{cluster: cluster, namespace: namespace}), name: name}
	s.lock.RLock()
	defer s.lock.RUnlock()
	for _, sh := range s.shards {
		if _, ok := sh.objects[k]; ok {
			return true
		}
	}
	return false
}

// Named reports whether an object named name exists in some namespace of
// cluster (or, for a cluster-scoped type, at all).
func (s *Set) Named(cluster logicalcluster.Name, name string) bool {
	k := nameKey{cluster: unique.Make(cluster), name: name}
	s.lock.RLock()
	defer s.lock.RUnlock()
	for _, sh := range s.shards {
		if sh.names[k] > 0 {
			return true
		}
	}
	return false
}

// Len returns the number of objects on all shards.
func (s *Set) Len() int {
	s.lock.RLock()
	defer s.lock.RUnlock()
	n := 0
	for _, sh := range s.shards {
		n += len(sh.objects)
	}
	return n
}

// DropShard forgets the objects of a shard, whose reflector has stopped.
func (s *Set) DropShard(url string) {
	s.lock.Lock()
	_, had := s.shards[url]
	delete(s.shards, url)
	s.lock.Unlock()
	if had {
		s.notify()
	}
}

// ForShard returns the cache.ReflectorStore of the reflector of one shard,
// which calls synced after each complete list it stores. The reflector
// reads store.Objects (see store.Decode: with no paths, only the
// metadata).
func (s *Set) ForShard(url string, synced func()) cache.ReflectorStore {
	return &shardStore{set: s, shard: url, synced: synced}
}

// shardStore is the cache.ReflectorStore of one shard's reflector.
type shardStore struct {
	set    *Set
	shard  string
	synced func()
}

var _ cache.ReflectorStore = &shardStore{}

func asObject(obj any) (*store.Object, error) {
	o, ok := obj.(*store.Object)
	if !ok {
		return nil, fmt.Errorf("unexpected object of type %T", obj)
	}
	return o, nil
}

// Add implements cache.ReflectorStore.
func (s *shardStore) Add(obj any) error {
	o, err := asObject(obj)
	if err != nil {
		return err
	}
	s.set.lock.Lock()
	sh := s.set.shards[s.shard]
	if sh == nil {
		sh = newShard(0)
		s.set.shards[s.shard] = sh
	}
	added := sh.add(o)
	s.set.lock.Unlock()
	if added {
		s.set.notifyAdded(o.Cluster)
	}
	return nil
}

// Update implements cache.ReflectorStore. An object keeps its name, so an
// update changes nothing the set holds.
func (s *shardStore) Update(obj any) error {
	return s.Add(obj)
}

// Delete implements cache.ReflectorStore.
func (s *shardStore) Delete(obj any) error {
	o, err := asObject(obj)
	if err != nil {
		return err
	}
	s.set.lock.Lock()
	removed := false
	if sh := s.set.shards[s.shard]; sh != nil {
		removed = sh.remove(o)
	}
	s.set.lock.Unlock()
	if removed {
		s.set.notify()
	}
	return nil
}

// Replace implements cache.ReflectorStore: the shard's complete list.
func (s *shardStore) Replace(list []any, _ string) error {
	sh := newShard(len(list))
	for _, obj := range list {
		o, err := asObject(obj)
		if err != nil {
			return err
		}
		sh.add(o)
	}
	s.set.lock.Lock()
	s.set.shards[s.shard] = sh
	s.set.lock.Unlock()
	s.synced()
	s.set.notifyAdded("")
	return nil
}

// Resync implements cache.ReflectorStore.
func (s *shardStore) Resync() error {
	return nil
}
