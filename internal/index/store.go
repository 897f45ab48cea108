package index

import (
	"fmt"
	"sync"
	"unique"

	"github.com/google/uuid"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-dev/logicalcluster/v3"
)

// Dependent is a dependent object as the index returns it: where it is, who
// it is, and whether it is being deleted.
type Dependent struct {
	// Cluster is the logical cluster (consumer workspace) of the object.
	Cluster logicalcluster.Name
	// Namespace is empty for a cluster-scoped object.
	Namespace string
	// Name is the object's name.
	Name string
	// UID is the object's UID.
	UID types.UID
	// Terminating is set once the object has a deletionTimestamp.
	Terminating bool
}

// entry is what the store keeps of one dependent, as compact as it can be:
// the strings of clusters, namespaces and referenced names are interned
// (many dependents share them), and a UUID is kept as its 16 bytes.
type entry struct {
	cluster     logicalcluster.Name
	namespace   string
	name        string
	uid         uid
	terminating bool
	// refs are the strings found at the source's paths, with the index of
	// the path; kept to unlink the entry from the reverse index.
	refs []ref
}

// ref is one string found at the path with the given index.
type ref struct {
	path  int
	value string
}

// uid holds a UID: the 16 bytes of a UUID, or the string of anything else.
type uid struct {
	uuid  [16]byte
	other string
}

func newUID(s types.UID) uid {
	if u, err := uuid.Parse(string(s)); err == nil && u.String() == string(s) {
		return uid{uuid: u}
	}
	return uid{other: string(s)}
}

func (u uid) String() types.UID {
	if u.other != "" || u.uuid == ([16]byte{}) {
		return types.UID(u.other)
	}
	return types.UID(uuid.UUID(u.uuid).String())
}

// objKey identifies an object within a source.
type objKey struct {
	cluster   logicalcluster.Name
	namespace string
	name      string
}

// refKey is one reference: a string found at the path with the given index
// in an object of a cluster.
type refKey struct {
	cluster logicalcluster.Name
	path    int
	value   string
}

// store holds the dependents of one source on every shard, with a reverse
// index from the strings found at the source's paths to the dependents that
// hold them. It is safe for concurrent use; lookups take a read lock and cost
// as much as the number of dependents they return.
type store struct {
	lock    sync.RWMutex
	objects map[string]map[objKey]*entry // by shard URL
	refs    map[refKey][]*entry
	// shardOf is the shard on which a cluster's objects were last seen.
	shardOf map[logicalcluster.Name]string
}

func newStore() *store {
	return &store{objects: map[string]map[objKey]*entry{}, refs: map[refKey][]*entry{}, shardOf: map[logicalcluster.Name]string{}}
}

// intern returns the canonical copy of s, so that strings that many
// dependents share are stored once.
func intern(s string) string {
	return unique.Make(s).Value()
}

// toEntry converts what the reflector read into what the store keeps.
func toEntry(o *object) *entry {
	e := &entry{
		cluster:     logicalcluster.Name(intern(o.Annotations[logicalcluster.AnnotationKey])),
		namespace:   intern(o.Namespace),
		name:        o.Name,
		uid:         newUID(o.UID),
		terminating: o.DeletionTimestamp != nil,
	}
	n := 0
	for _, values := range o.Values {
		n += len(values)
	}
	if n > 0 {
		e.refs = make([]ref, 0, n)
	}
	for i, values := range o.Values {
		for _, v := range values {
			e.refs = append(e.refs, ref{path: i, value: intern(v)})
		}
	}
	return e
}

func (e *entry) key() objKey {
	return objKey{cluster: e.cluster, namespace: e.namespace, name: e.name}
}

func (e *entry) refKey(r ref) refKey {
	return refKey{cluster: e.cluster, path: r.path, value: r.value}
}

func (e *entry) dependent() Dependent {
	return Dependent{Cluster: e.cluster, Namespace: e.namespace, Name: e.name, UID: e.uid.String(), Terminating: e.terminating}
}

// put adds or replaces a dependent on a shard. Callers hold the lock.
func (s *store) put(shard string, e *entry) {
	objs := s.objects[shard]
	if objs == nil {
		objs = map[objKey]*entry{}
		s.objects[shard] = objs
	}
	k := e.key()
	if old, ok := objs[k]; ok {
		s.unlink(old)
	}
	objs[k] = e
	for _, r := range e.refs {
		rk := e.refKey(r)
		s.refs[rk] = append(s.refs[rk], e)
	}
	s.shardOf[e.cluster] = shard
}

// remove removes a dependent from a shard. Callers hold the lock.
func (s *store) remove(shard string, k objKey) {
	if old, ok := s.objects[shard][k]; ok {
		s.unlink(old)
		delete(s.objects[shard], k)
	}
}

// unlink removes e from the reverse index. Callers hold the lock.
func (s *store) unlink(e *entry) {
	for _, r := range e.refs {
		rk := e.refKey(r)
		holders := s.refs[rk]
		for i, h := range holders {
			if h == e {
				holders[i] = holders[len(holders)-1]
				holders[len(holders)-1] = nil
				holders = holders[:len(holders)-1]
				break
			}
		}
		if len(holders) == 0 {
			delete(s.refs, rk)
		} else {
			s.refs[rk] = holders
		}
	}
}

// dropShard removes everything of a shard. Callers hold the lock.
func (s *store) dropShard(shard string) {
	for _, e := range s.objects[shard] {
		s.unlink(e)
	}
	delete(s.objects, shard)
	for cluster, sh := range s.shardOf {
		if sh == shard {
			delete(s.shardOf, cluster)
		}
	}
}

// referencing returns the dependents of cluster that hold value at one of
// the paths with the given indices, each once, in no particular order.
func (s *store) referencing(cluster logicalcluster.Name, paths []int, value string) []Dependent {
	s.lock.RLock()
	defer s.lock.RUnlock()
	var out []Dependent
	var seen map[*entry]bool
	for _, p := range paths {
		for _, e := range s.refs[refKey{cluster: cluster, path: p, value: value}] {
			if len(paths) > 1 {
				if seen == nil {
					seen = map[*entry]bool{}
				}
				if seen[e] {
					continue
				}
				seen[e] = true
			}
			out = append(out, e.dependent())
		}
	}
	return out
}

// shard returns the shard on which objects of cluster were seen, if any.
func (s *store) shard(cluster logicalcluster.Name) (string, bool) {
	s.lock.RLock()
	defer s.lock.RUnlock()
	shard, ok := s.shardOf[cluster]
	return shard, ok
}

// len returns the number of dependents on all shards.
func (s *store) len() int {
	s.lock.RLock()
	defer s.lock.RUnlock()
	n := 0
	for _, objs := range s.objects {
		n += len(objs)
	}
	return n
}

// shardStore is the cache.ReflectorStore of one shard's reflector.
type shardStore struct {
	store  *store
	shard  string
	synced func()
}

var _ cache.ReflectorStore = &shardStore{}

func asObject(obj any) (*object, error) {
	o, ok := obj.(*object)
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
	s.store.lock.Lock()
	defer s.store.lock.Unlock()
	s.store.put(s.shard, toEntry(o))
	return nil
}

// Update implements cache.ReflectorStore.
func (s *shardStore) Update(obj any) error {
	return s.Add(obj)
}

// Delete implements cache.ReflectorStore.
func (s *shardStore) Delete(obj any) error {
	o, err := asObject(obj)
	if err != nil {
		return err
	}
	s.store.lock.Lock()
	defer s.store.lock.Unlock()
	s.store.remove(s.shard, objKey{cluster: logicalcluster.Name(o.Annotations[logicalcluster.AnnotationKey]), namespace: o.Namespace, name: o.Name})
	return nil
}

// Replace implements cache.ReflectorStore: the shard's complete list.
func (s *shardStore) Replace(list []any, _ string) error {
	entries := make([]*entry, 0, len(list))
	for _, obj := range list {
		o, err := asObject(obj)
		if err != nil {
			return err
		}
		entries = append(entries, toEntry(o))
	}
	s.store.lock.Lock()
	s.store.dropShard(s.shard)
	for _, e := range entries {
		s.store.put(s.shard, e)
	}
	s.store.lock.Unlock()
	s.synced()
	return nil
}

// Resync implements cache.ReflectorStore.
func (s *shardStore) Resync() error {
	return nil
}
