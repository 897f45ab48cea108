// Package store keeps, for one dependent type, the dependents of every
// shard that the index has read: of each only where it is, who it is,
// whether it is being deleted, and the strings at the paths the rules name,
// with a reverse index from those strings to the dependents that hold them.
// Lookups cost as much as the dependents they return, not as many as there
// are. The store is fed by one reflector per shard (see ForShard).
//
// It also knows how current it is: how far each shard's reflector has
// stored what it read (Progress), and, from samples of each shard's
// resourceVersion, until when everything stored on the shard is in it
// (Currency). And it remembers for a while the admission ids it has seen
// on dependents, and the ids of the revisions of dependents it has seen end
// (Admitted, RevisionID).
package store

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/google/uuid"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// scope is where a dependent lives: its logical cluster and namespace
// (empty for a cluster-scoped dependent). The dependents of one namespace
// share one interned scope.
type scope struct {
	cluster   logicalcluster.Name
	namespace string
}

// entry is what the store keeps of one dependent, as compact as it can be
// (88 bytes, plus 32 per reference and the name): the scope is an interned
// handle, since the dependents of a namespace share it, and so is the
// namespace a reference names, a referenced name is stored once per cluster
// however many dependents reference it (see share), and a UID that is a
// UUID is kept as its 16 bytes.
type entry struct {
	scope unique.Handle[scope]
	name  string
	uid   uid
	// terminating is set once the dependent has a deletionTimestamp.
	terminating bool
	// revision stands for the id of writes admitted on the revision the
	// entry was read at (see RevisionID).
	revision uint64
	// refs are the strings found at the source's paths, with the index of
	// the path; kept to unlink the entry from the reverse index.
	refs []ref
}

// ref is one reference found at the path with the given index: the name,
// and the namespace if the reference names one (the zero handle if not).
type ref struct {
	path      uint16
	namespace unique.Handle[string]
	value     string
}

// refersTo reports whether r, held by a dependent in dependentNamespace,
// can name an object in namespace (see fieldpath.RefersTo).
func (r ref) refersTo(dependentNamespace, namespace string) bool {
	ns := ""
	if r.namespace != (unique.Handle[string]{}) {
		ns = r.namespace.Value()
	}
	return fieldpath.RefersTo(ns, dependentNamespace, namespace)
}

// uid holds a UID: the 16 bytes of a UUID (what kcp assigns), or a handle
// of any other string.
type uid struct {
	uuid  [16]byte
	other unique.Handle[string]
}

func newUID(s types.UID) uid {
	// The all-zero UUID is kept as a string: its 16 bytes mean "no UID".
	if u, err := uuid.Parse(string(s)); err == nil && u.String() == string(s) && u != (uuid.UUID{}) {
		return uid{uuid: u}
	}
	if s == "" {
		return uid{}
	}
	return uid{other: unique.Make(string(s))}
}

func (u uid) String() types.UID {
	if u.other != (unique.Handle[string]{}) {
		return types.UID(u.other.Value())
	}
	if u.uuid == ([16]byte{}) {
		return ""
	}
	return types.UID(uuid.UUID(u.uuid).String())
}

// objKey identifies an object within a source.
type objKey struct {
	scope unique.Handle[scope]
	name  string
}

// refKey is a string that objects of a cluster hold at some path; which
// paths is in each holder's refs.
type refKey struct {
	cluster unique.Handle[logicalcluster.Name]
	value   string
}

// Store holds the dependents of one source on every shard, with a reverse
// index from the strings found at the source's paths to the dependents that
// hold them (each dependent once per string, at however many paths). It is
// safe for concurrent use; lookups take a read lock and cost as much as the
// number of dependents they return.
type Store struct {
	lock    sync.RWMutex
	objects map[string]map[objKey]*entry // by shard URL
	refs    map[refKey][]*entry
	// shardOf is the shard on which a cluster's objects were last seen.
	shardOf map[logicalcluster.Name]string
	// count is the number of objects of each cluster that has any.
	count map[logicalcluster.Name]int
	// changed, if not nil, is called after every change, without the lock,
	// with the cluster whose dependents changed (empty: any of them).
	changed func(cluster logicalcluster.Name)

	// plock guards progress and samples, by shard URL.
	plock    sync.Mutex
	progress map[string]*progress
	samples  map[string]*samples
	now      func() time.Time

	// admissions are the admission ids seen on dependents.
	admissions admissions
}

// New returns an empty store that calls changed (if not nil) after every
// change of its contents, with the cluster whose dependents changed (empty
// after a complete list of a shard: any of them).
func New(changed func(cluster logicalcluster.Name)) *Store {
	return &Store{objects: map[string]map[objKey]*entry{}, refs: map[refKey][]*entry{}, shardOf: map[logicalcluster.Name]string{},
		count: map[logicalcluster.Name]int{}, changed: changed, progress: map[string]*progress{}, samples: map[string]*samples{}, now: time.Now,
		admissions: admissions{memory: DefaultAdmissionMemory, first: map[uint64]int64{}}}
}

// notify calls the changed hook for cluster (empty: any).
func (s *Store) notify(cluster logicalcluster.Name) {
	if s.changed != nil {
		s.changed(cluster)
	}
}

// counted adds d to the number of objects of cluster.
func (s *Store) counted(cluster logicalcluster.Name, d int) {
	if n := s.count[cluster] + d; n > 0 {
		s.count[cluster] = n
	} else {
		delete(s.count, cluster)
	}
}

// scopeOf returns the interned scope of an object.
func scopeOf(o *Object) unique.Handle[scope] {
	return unique.Make(scope{cluster: o.Cluster, namespace: o.Namespace})
}

// toEntry converts what the reflector read into what the store keeps.
func toEntry(o *Object) *entry {
	e := &entry{
		scope:       scopeOf(o),
		name:        o.Name,
		uid:         newUID(o.UID),
		terminating: o.DeletionTimestamp != nil,
		revision:    revisionKey(string(o.UID), o.ResourceVersion),
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
			r := ref{path: uint16(i), value: v.Name}
			if v.Namespace != "" {
				r.namespace = unique.Make(v.Namespace)
			}
			e.refs = append(e.refs, r)
		}
	}
	return e
}

func (e *entry) key() objKey {
	return objKey{scope: e.scope, name: e.name}
}

// refKeys returns the keys under which e is in the reverse index: one per
// distinct string it holds.
func (e *entry) refKeys() []refKey {
	if len(e.refs) == 0 {
		return nil
	}
	cluster := unique.Make(e.scope.Value().cluster)
	keys := make([]refKey, 0, len(e.refs))
	for _, r := range e.refs {
		k := refKey{cluster: cluster, value: r.value}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// share makes e's copies of the strings that other also holds point at
// other's copies, so that a name that many dependents reference is stored
// once. (Interning every value would cost more than it saves for names that
// only one dependent references.)
func (e *entry) share(other *entry) {
	for i := range e.refs {
		for _, r := range other.refs {
			if r.value == e.refs[i].value {
				e.refs[i].value = r.value
				break
			}
		}
	}
}

// holds reports whether e holds a reference to value in namespace (see
// fieldpath.RefersTo) at one of the paths with the given indices.
func (e *entry) holds(namespace, value string, paths []int) bool {
	for _, r := range e.refs {
		if r.value == value && slices.Contains(paths, int(r.path)) && r.refersTo(e.scope.Value().namespace, namespace) {
			return true
		}
	}
	return false
}

func (e *entry) dependent() kcp.Meta {
	sc := e.scope.Value()
	return kcp.Meta{Cluster: sc.cluster, Namespace: sc.namespace, Name: e.name, UID: e.uid.String(), Terminating: e.terminating}
}

// put adds or replaces a dependent on a shard. Callers hold the lock.
func (s *Store) put(shard string, e *entry) {
	objs := s.objects[shard]
	if objs == nil {
		objs = map[objKey]*entry{}
		s.objects[shard] = objs
	}
	k := e.key()
	if old, ok := objs[k]; ok {
		s.unlink(old)
	} else {
		s.counted(e.scope.Value().cluster, 1)
	}
	objs[k] = e
	for _, rk := range e.refKeys() {
		holders := s.refs[rk]
		if len(holders) > 0 {
			e.share(holders[0])
		}
		s.refs[rk] = append(holders, e)
	}
	s.shardOf[e.scope.Value().cluster] = shard
}

// remove removes a dependent from a shard. Callers hold the lock.
func (s *Store) remove(shard string, k objKey) {
	if old, ok := s.objects[shard][k]; ok {
		s.unlink(old)
		delete(s.objects[shard], k)
		s.counted(old.scope.Value().cluster, -1)
	}
}

// unlink removes e from the reverse index. Callers hold the lock.
func (s *Store) unlink(e *entry) {
	for _, rk := range e.refKeys() {
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

// DropShard removes everything of a shard, whose reflector has stopped.
func (s *Store) DropShard(shard string) {
	s.lock.Lock()
	s.dropShard(shard)
	s.lock.Unlock()
	s.dropProgress(shard)
}

// dropShard removes everything of a shard. Callers hold the lock.
func (s *Store) dropShard(shard string) {
	for _, e := range s.objects[shard] {
		s.unlink(e)
		s.counted(e.scope.Value().cluster, -1)
	}
	delete(s.objects, shard)
	for cluster, sh := range s.shardOf {
		if sh == shard {
			delete(s.shardOf, cluster)
		}
	}
}

// Referencing returns the dependents of cluster that reference the object
// named value in namespace (empty for a cluster-scoped object) at one of
// the paths with the given indices (into the paths the source is read
// with), each once, in no particular order.
func (s *Store) Referencing(cluster logicalcluster.Name, paths []int, namespace, value string) []kcp.Meta {
	key := refKey{cluster: unique.Make(cluster), value: value}
	s.lock.RLock()
	defer s.lock.RUnlock()
	var out []kcp.Meta
	for _, e := range s.refs[key] {
		if e.holds(namespace, key.value, paths) {
			out = append(out, e.dependent())
		}
	}
	return out
}

// Holds reports whether the store has objects of cluster.
func (s *Store) Holds(cluster logicalcluster.Name) bool {
	s.lock.RLock()
	defer s.lock.RUnlock()
	return s.count[cluster] > 0
}

// Shard returns the shard on which objects of cluster were last seen, if
// any.
func (s *Store) Shard(cluster logicalcluster.Name) (string, bool) {
	s.lock.RLock()
	defer s.lock.RUnlock()
	shard, ok := s.shardOf[cluster]
	return shard, ok
}

// anyScan bounds how many dependents Any looks at for one that holds a
// reference.
const anyScan = 64

// Any returns one dependent of shard that is not being deleted, if it has
// any: an object to probe the shard's admission with (see package
// tracking). It prefers one that holds a reference, among the first
// anyScan it looks at: a probe that sets a reference where the schema
// needs other fields next to it renames one the dependent holds.
func (s *Store) Any(shard string) (kcp.Meta, bool) {
	s.lock.RLock()
	defer s.lock.RUnlock()
	var found *entry
	seen := 0
	for _, e := range s.objects[shard] {
		if e.terminating {
			continue
		}
		if len(e.refs) > 0 {
			return e.dependent(), true
		}
		if found == nil {
			found = e
		}
		if seen++; seen >= anyScan {
			break
		}
	}
	if found == nil {
		return kcp.Meta{}, false
	}
	return found.dependent(), true
}

// Largest returns the dependent that holds the most references, and how
// many: distinct names (with the namespace a reference names, if it names
// one) at each of the source's paths, which is how many objects it
// references unless two paths name the same object. Of dependents that hold
// as many, it returns the first by cluster, namespace and name, so that
// replicas agree; none (0) if no dependent holds a reference. It reads every
// dependent, so callers ask now and then, not per request.
func (s *Store) Largest() (kcp.Meta, int) {
	s.lock.RLock()
	defer s.lock.RUnlock()
	var (
		largest *entry
		most    int
	)
	for _, objs := range s.objects {
		for _, e := range objs {
			if len(e.refs) < most {
				continue // fewer, however many of them repeat
			}
			n := e.distinctRefs()
			if n > most || n == most && n > 0 && e.before(largest) {
				largest, most = e, n
			}
		}
	}
	if largest == nil {
		return kcp.Meta{}, 0
	}
	return largest.dependent(), most
}

// distinctRefs returns how many of e's references differ.
func (e *entry) distinctRefs() int {
	if len(e.refs) <= 16 {
		n := 0
		for i, r := range e.refs {
			if !slices.Contains(e.refs[:i], r) {
				n++
			}
		}
		return n
	}
	seen := make(map[ref]struct{}, len(e.refs))
	for _, r := range e.refs {
		seen[r] = struct{}{}
	}
	return len(seen)
}

// before reports whether e sorts before other (nil sorts last) by
// cluster, namespace and name.
func (e *entry) before(other *entry) bool {
	if other == nil {
		return true
	}
	a, b := e.scope.Value(), other.scope.Value()
	if a.cluster != b.cluster {
		return a.cluster < b.cluster
	}
	if a.namespace != b.namespace {
		return a.namespace < b.namespace
	}
	return e.name < other.name
}

// Len returns the number of dependents on all shards.
func (s *Store) Len() int {
	s.lock.RLock()
	defer s.lock.RUnlock()
	n := 0
	for _, objs := range s.objects {
		n += len(objs)
	}
	return n
}

// ForShard returns the cache.ReflectorStore of the reflector of one shard,
// which calls synced after each complete list it stores.
func (s *Store) ForShard(shard string, synced func()) cache.ReflectorStore {
	return &shardStore{store: s, shard: shard, synced: synced}
}

// shardStore is the cache.ReflectorStore of one shard's reflector.
type shardStore struct {
	store  *Store
	shard  string
	synced func()
	// stored is set by Add, Update and Delete, and cleared by the
	// UpdateResourceVersion that follows them: the reflector calls
	// UpdateResourceVersion alone only for a bookmark.
	stored atomic.Bool
}

var (
	_ cache.ReflectorStore         = &shardStore{}
	_ cache.ResourceVersionUpdater = &shardStore{}
)

func asObject(obj any) (*Object, error) {
	o, ok := obj.(*Object)
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
	e := toEntry(o)
	s.store.lock.Lock()
	old := s.store.objects[s.shard][e.key()]
	s.store.put(s.shard, e)
	s.store.lock.Unlock()
	s.stored.Store(true)
	var keys [2]uint64
	s.store.admitted(revised(keys[:0], old, e), o.Admission)
	s.store.notify(o.Cluster)
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
	k := objKey{scope: scopeOf(o), name: o.Name}
	s.store.lock.Lock()
	old := s.store.objects[s.shard][k]
	s.store.remove(s.shard, k)
	s.store.lock.Unlock()
	s.stored.Store(true)
	var keys [1]uint64
	s.store.admitted(revised(keys[:0], old, nil), o.Admission)
	s.store.notify(o.Cluster)
	return nil
}

// Replace implements cache.ReflectorStore: the shard's complete list, at
// resourceVersion.
func (s *shardStore) Replace(list []any, resourceVersion string) error {
	entries := make([]*entry, 0, len(list))
	var ids []string
	for _, obj := range list {
		o, err := asObject(obj)
		if err != nil {
			return err
		}
		entries = append(entries, toEntry(o))
		if o.Admission != "" {
			ids = append(ids, o.Admission)
		}
	}
	s.store.lowerProgress(s.shard, resourceVersion)
	s.store.lock.Lock()
	olds := s.store.objects[s.shard]
	s.store.dropShard(s.shard)
	var revisions []uint64
	for _, e := range entries {
		revisions = revised(revisions, olds[e.key()], e)
		s.store.put(s.shard, e)
	}
	listed := s.store.objects[s.shard]
	for k, old := range olds {
		if _, ok := listed[k]; !ok {
			revisions = revised(revisions, old, nil)
		}
	}
	s.store.lock.Unlock()
	s.store.setProgress(s.shard, resourceVersion, true, true)
	s.store.admitted(revisions, ids...)
	s.synced()
	s.store.notify("")
	return nil
}

// UpdateResourceVersion implements cache.ResourceVersionUpdater: the
// reflector calls it after each event it stored (with Add, Update or
// Delete just before) and each bookmark (alone).
func (s *shardStore) UpdateResourceVersion(resourceVersion string) {
	s.store.setProgress(s.shard, resourceVersion, false, s.stored.Swap(false))
}

// Resync implements cache.ReflectorStore.
func (s *shardStore) Resync() error {
	return nil
}
