package store

import (
	"unique"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Holder is a dependent that holds references, as Each passes it.
type Holder struct {
	e    *entry
	refs []Held
}

// Held is one reference a dependent holds: the index of its path (into the
// paths the source is read with), the namespace the reference names (empty
// if it names none) and the name.
type Held struct {
	Path      int
	Namespace string
	Name      string
}

// Cluster returns the logical cluster of the dependent.
func (h *Holder) Cluster() logicalcluster.Name {
	return h.e.scope.Value().cluster
}

// Namespace returns the namespace of the dependent, empty if it is
// cluster-scoped.
func (h *Holder) Namespace() string {
	return h.e.scope.Value().namespace
}

// Name returns the name of the dependent.
func (h *Holder) Name() string {
	return h.e.name
}

// Meta returns the metadata of the dependent that the store keeps.
func (h *Holder) Meta() kcp.Meta {
	return h.e.dependent()
}

// Refs returns the references the dependent holds.
func (h *Holder) Refs() []Held {
	return h.refs
}

// Each calls fn with every dependent of every shard that holds a reference
// and is not being deleted, in no particular order. It takes the store's
// lock only to collect them, so fn may call the store; it sees the
// dependents as they were when Each was called. h is reused: fn must not
// keep it or its Refs.
func (s *Store) Each(fn func(h *Holder)) {
	s.lock.RLock()
	n := 0
	for _, objs := range s.objects {
		n += len(objs)
	}
	entries := make([]*entry, 0, n)
	for _, objs := range s.objects {
		for _, e := range objs {
			if len(e.refs) > 0 && !e.terminating {
				entries = append(entries, e)
			}
		}
	}
	s.lock.RUnlock()
	// Entries are not changed once stored (a change stores a new one), so
	// they are read without the lock.
	h := &Holder{}
	for _, e := range entries {
		h.e, h.refs = e, h.refs[:0]
		for _, r := range e.refs {
			ns := ""
			if r.namespace != (unique.Handle[string]{}) {
				ns = r.namespace.Value()
			}
			h.refs = append(h.refs, Held{Path: int(r.path), Namespace: ns, Name: r.value})
		}
		fn(h)
	}
}

// Has reports whether the store holds the object named name in namespace
// (empty for a cluster-scoped object) of cluster, on some shard: an
// object of the source exists, whatever it references.
func (s *Store) Has(cluster logicalcluster.Name, namespace, name string) bool {
	k := objKey{scope: unique.Make(scope{cluster: cluster, namespace: namespace}), name: name}
	s.lock.RLock()
	defer s.lock.RUnlock()
	for _, objs := range s.objects {
		if _, ok := objs[k]; ok {
			return true
		}
	}
	return false
}

// Named reports whether the store holds an object named name in some
// namespace of cluster. It looks at every object of the cluster's shard,
// as the store keeps no index by name alone; the audit asks it only for
// the reference of a cluster-scoped dependent that names no namespace,
// to a type that is itself a dependent type.
func (s *Store) Named(cluster logicalcluster.Name, name string) bool {
	s.lock.RLock()
	defer s.lock.RUnlock()
	shard, ok := s.shardOf[cluster]
	if !ok || s.count[cluster] == 0 {
		return false
	}
	for k := range s.objects[shard] {
		if k.name == name && k.scope.Value().cluster == cluster {
			return true
		}
	}
	return false
}
