// Package registry keeps the metadata of all DependencyRules that the webhook
// needs on the DELETE path: for each protected resource, which dependent
// types reference it and at which field paths.
//
// The registry is fed from two sources: a controller that sees every change
// of a rule, and full listings of all rules (at startup and periodically).
// Either source may deliver an older view than the registry already has, so
// every write carries the resourceVersion it reflects, and the registry keeps
// the newest: an object's resourceVersion for Apply, and for Delete the
// resourceVersion at which the rule was known to be gone (a list's
// resourceVersion, or the last one seen). Deleted rules leave a tombstone so
// that an older listing cannot bring them back; Sync drops tombstones a
// newer listing confirms.
//
// Reads (FindByTargetGVR) are lock-free: writers publish an immutable
// snapshot with a reverse index from protected resource to entries.
package registry

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// Rule is the metadata of one DependencyRule.
type Rule struct {
	// Key is "<logical cluster>/<name>".
	Key string
	// Dependent is the resource holding references.
	Dependent schema.GroupVersionResource
	// DependentKind is the kind of the dependent, used in messages.
	DependentKind string
	// References are the protected resources and where the dependent
	// references them.
	References []Reference
	// Invalid lists field paths that did not parse. The API server rejects
	// them, so this only happens for rules stored before validation existed.
	Invalid []string
}

// Reference is one dependency of a rule.
type Reference struct {
	// Target is the protected resource; versions do not matter, since a
	// resource is the same object in every version.
	Target schema.GroupResource
	// Path is where the dependent stores the target's name.
	Path fieldpath.Path
}

// Entry is what FindByTargetGVR returns: a dependent type that references
// the target, with every path at which one rule says it does.
type Entry struct {
	// RuleKey identifies the rule, for logs.
	RuleKey string
	// Dependent is the resource holding references.
	Dependent schema.GroupVersionResource
	// DependentKind is the kind of the dependent.
	DependentKind string
	// Paths are the field paths that hold the target's name, sorted.
	Paths []fieldpath.Path
}

// Key returns the registry key of a rule.
func Key(cluster logicalcluster.Name, name string) string {
	return cluster.String() + "/" + name
}

// FromDependencyRule extracts the metadata of a rule.
func FromDependencyRule(rule *depv1alpha1.DependencyRule) *Rule {
	r := &Rule{
		Key:           Key(logicalcluster.From(rule), rule.Name),
		Dependent:     schema.GroupVersionResource{Group: rule.Spec.Dependent.Group, Version: rule.Spec.Dependent.Version, Resource: rule.Spec.Dependent.Resource},
		DependentKind: rule.Spec.Dependent.Kind,
	}
	for _, d := range rule.Spec.Dependencies {
		p, err := fieldpath.Parse(d.FieldRef.Path)
		if err != nil {
			r.Invalid = append(r.Invalid, d.FieldRef.Path)
			continue
		}
		r.References = append(r.References, Reference{Target: schema.GroupResource{Group: d.Group, Resource: d.Resource}, Path: p})
	}
	return r
}

// record is the registry's state for one key.
type record struct {
	rule *Rule // nil for a tombstone
	rv   uint64
}

// snapshot is an immutable view for readers.
type snapshot struct {
	byTarget map[schema.GroupResource][]Entry
	rules    int
}

// Registry is a thread-safe store of rule metadata. The zero value is not
// usable; call New.
type Registry struct {
	lock    sync.Mutex
	records map[string]record
	current atomic.Pointer[snapshot]
}

// New returns an empty registry.
func New() *Registry {
	r := &Registry{records: map[string]record{}}
	r.current.Store(&snapshot{byTarget: map[schema.GroupResource][]Entry{}})
	return r
}

// ParseResourceVersion parses a resourceVersion; kcp's are decimal numbers.
// Anything else parses as 0, which loses against every known version.
func ParseResourceVersion(rv string) uint64 {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Apply registers or replaces a rule as of resourceVersion rv. It is ignored
// if the registry already reflects rv or newer for this key, and reports
// whether it changed anything.
func (r *Registry) Apply(rule *Rule, rv uint64) bool {
	r.lock.Lock()
	defer r.lock.Unlock()
	if old, ok := r.records[rule.Key]; ok && old.rv >= rv && rv != 0 {
		return false
	}
	r.records[rule.Key] = record{rule: rule, rv: rv}
	r.publish()
	return true
}

// Delete removes the rule with the given key as of resourceVersion rv: it is
// kept if the registry holds a newer version of it. A tombstone remembers
// rv. It reports whether it changed anything.
func (r *Registry) Delete(key string, rv uint64) bool {
	r.lock.Lock()
	defer r.lock.Unlock()
	old, ok := r.records[key]
	if ok && old.rv > rv {
		return false
	}
	r.records[key] = record{rv: rv}
	if !ok || old.rule == nil {
		return false
	}
	r.publish()
	return true
}

// DeleteCluster deletes, as of resourceVersion rv, every rule of a logical
// cluster; used when the cluster stops binding the APIExport.
func (r *Registry) DeleteCluster(cluster logicalcluster.Name, rv uint64) {
	r.lock.Lock()
	defer r.lock.Unlock()
	prefix := cluster.String() + "/"
	changed := false
	for key, rec := range r.records {
		if !strings.HasPrefix(key, prefix) || rec.rv > rv {
			continue
		}
		changed = changed || rec.rule != nil
		r.records[key] = record{rv: rv}
	}
	if changed {
		r.publish()
	}
}

// LastSeen returns the resourceVersion the registry reflects for key, or 0.
func (r *Registry) LastSeen(key string) uint64 {
	r.lock.Lock()
	defer r.lock.Unlock()
	return r.records[key].rv
}

// Sync applies a complete listing of the rules in some logical clusters (one
// shard's rules), taken at resourceVersion listRV: every listed rule is
// applied, and every registered rule of those clusters that the listing does
// not contain is deleted as of listRV. inScope reports whether a key belongs
// to the listed clusters.
func (r *Registry) Sync(rules []*Rule, rvs []uint64, listRV uint64, inScope func(key string) bool) {
	r.lock.Lock()
	defer r.lock.Unlock()
	listed := make(map[string]bool, len(rules))
	for i, rule := range rules {
		listed[rule.Key] = true
		if old, ok := r.records[rule.Key]; ok && old.rv >= rvs[i] && rvs[i] != 0 {
			continue
		}
		r.records[rule.Key] = record{rule: rule, rv: rvs[i]}
	}
	for key, rec := range r.records {
		if listed[key] || !inScope(key) || rec.rv > listRV {
			continue
		}
		// Gone as of the listing: forget it, tombstone included, since the
		// listing is newer than anything the registry knows about it.
		delete(r.records, key)
	}
	r.publish()
}

// FindByTargetGVR returns the entries for rules that protect the resource
// gvr, in any version. The result is shared and must not be modified.
func (r *Registry) FindByTargetGVR(gvr schema.GroupVersionResource) []Entry {
	return r.current.Load().byTarget[gvr.GroupResource()]
}

// Len returns the number of registered rules.
func (r *Registry) Len() int {
	return r.current.Load().rules
}

// publish rebuilds the read snapshot. Callers hold the lock.
func (r *Registry) publish() {
	s := &snapshot{byTarget: map[schema.GroupResource][]Entry{}}
	for _, rec := range r.records {
		if rec.rule == nil {
			continue
		}
		s.rules++
		byTarget := map[schema.GroupResource]*Entry{}
		for _, ref := range rec.rule.References {
			e, ok := byTarget[ref.Target]
			if !ok {
				e = &Entry{RuleKey: rec.rule.Key, Dependent: rec.rule.Dependent, DependentKind: rec.rule.DependentKind}
				byTarget[ref.Target] = e
			}
			e.Paths = append(e.Paths, ref.Path)
		}
		for target, e := range byTarget {
			slices.SortFunc(e.Paths, func(a, b fieldpath.Path) int { return cmp.Compare(a.String(), b.String()) })
			e.Paths = slices.Compact(e.Paths)
			s.byTarget[target] = append(s.byTarget[target], *e)
		}
	}
	for _, entries := range s.byTarget {
		slices.SortFunc(entries, func(a, b Entry) int { return cmp.Compare(a.RuleKey, b.RuleKey) })
	}
	r.current.Store(s)
}
