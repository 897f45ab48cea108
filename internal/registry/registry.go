// Package registry keeps the metadata of all DependencyRules that the webhook
// needs on the admission path: for each protected resource, which dependent
// types reference it and at which field paths (for DELETEs of protected
// objects), and for each dependent type which references its creates and
// updates may add (for the reference guard).
//
// The registry is fed from two sources (see package rulesync): a reconciler
// that sees every change of a rule through the manager's cache, and complete
// listings of all rules of a shard (at startup and periodically). Either may
// deliver an older view than the registry already has, so
//
//   - of two views of one rule, the one with the newer resourceVersion wins;
//     resourceVersions are only ever compared between DependencyRules (of one
//     shard), never with those of other resources;
//   - a rule known to be deleted leaves a tombstone keyed by its UID, so that
//     an older listing cannot bring it back, while a rule recreated under the
//     same name (a new UID) is registered at once.
//
// Rules protect objects of the provider they name: the registry finds
// entries by Target, the workspace of the protected APIExport (whose path a
// rule names, resolved through the kcp.io/path annotation of the workspace's
// binding to the APIExport) and the resource.
//
// Reads (Find) take no lock: writers publish an immutable snapshot
// with a reverse index from protected resource to entries. Metrics reports
// the number of registered rules.
package registry

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// tombstoneTTL is how long the UID of a deleted rule is remembered. A
// listing is applied seconds after it is taken, so a listing older than this
// cannot arrive.
const tombstoneTTL = 10 * time.Minute

// Rule is the metadata of one DependencyRule.
type Rule struct {
	// Key identifies the rule: its logical cluster and name.
	Key kcp.ObjectKey
	// UID is the rule object's UID; a rule recreated under the same name has
	// a new one.
	UID types.UID
	// ResourceVersion is the version of the rule object this metadata was
	// read from.
	ResourceVersion string
	// Generation is the rule's metadata.generation.
	Generation int64
	// Terminating is set once the rule has a deletionTimestamp.
	Terminating bool
	// Labelled is set while the rule reports DependentsLabelled=True: its
	// dependents are labelled with what they reference.
	Labelled bool
	// Tracking is what the rule's ReferencesTracked condition says.
	Tracking Tracking
	// Dependent is the resource holding references, as served by the
	// APIExport in the rule's workspace that the rule names.
	Dependent index.Source
	// DependentKind is the kind of the dependent, used in messages.
	DependentKind string
	// References are the protected resources and where the dependent
	// references them.
	References []Reference
	// Replay is set when the rule's deletion policy is Replay: a DELETE of
	// an object it protects that its dependents still reference is
	// recorded and replayed once nothing references the object.
	Replay bool
	// Invalid lists field paths that did not parse. The API server rejects
	// them, so this only happens for rules stored before validation existed.
	Invalid []string
}

// Tracking is what a rule's ReferencesTracked condition says: whether
// every reference its dependents add is recorded on the object it names
// before the dependent is stored, and since when (its lastTransitionTime).
type Tracking struct {
	// Status is the condition's status; empty while the rule has none.
	Status metav1.ConditionStatus
	// Since is when the condition last changed its status.
	Since time.Time
}

// Tracked reports whether the rule's references are tracked, and since
// when.
func (t Tracking) Tracked() (time.Time, bool) {
	return t.Since, t.Status == metav1.ConditionTrue
}

// Untracked reports whether the rule says its references are not tracked,
// since when: then a reference that cannot be recorded is admitted
// unrecorded. While the condition is True, Unknown or not there yet, it
// is not.
func (t Tracking) Untracked() (time.Time, bool) {
	return t.Since, t.Status == metav1.ConditionFalse
}

// trackingOf reads the ReferencesTracked condition of rule.
func trackingOf(rule *depv1alpha1.DependencyRule) Tracking {
	c := meta.FindStatusCondition(rule.Status.Conditions, depv1alpha1.ConditionReferencesTracked)
	if c == nil {
		return Tracking{}
	}
	return Tracking{Status: c.Status, Since: c.LastTransitionTime.Time}
}

// Reference is one dependency of a rule.
type Reference struct {
	// Workspace is the path of the workspace of the APIExport that serves
	// the protected resource (apiExportRef.path).
	Workspace logicalcluster.Path
	// Export is the name of that APIExport (apiExportRef.name).
	Export string
	// Target is the protected resource. Deletes are protected in every
	// version, since a resource is the same object in every version.
	Target schema.GroupResource
	// Version is the version the rule names, in which the webhook reads
	// targets.
	Version string
	// Path is where the dependent stores the target's name.
	Path fieldpath.Reference
}

// Target is a protected resource as one provider serves it: the logical
// cluster of the workspace whose APIExport serves it, and the resource. kcp
// calls the webhook configured in that workspace for deletes of the objects
// that the workspace's exports serve, and only for those, so a rule protects
// the objects of the provider it names and no other provider's objects of a
// resource with the same name.
type Target struct {
	// Cluster is the logical cluster of the provider's workspace.
	Cluster logicalcluster.Name
	// Resource is the protected resource.
	Resource schema.GroupResource
}

// Guard is what FindGuards returns: a rule whose dependent type a provider
// workspace serves, with the references that a new or changed dependent must
// not make to a target that is being deleted.
type Guard struct {
	// Rule identifies the rule, for logs and audit annotations.
	Rule kcp.ObjectKey
	// Dependent is the resource holding references.
	Dependent index.Source
	// References are the rule's references, in the order of the rule.
	References []GuardReference
	// Tracking is what the rule's ReferencesTracked condition says.
	Tracking Tracking
}

// GuardReference is one reference of a Guard.
type GuardReference struct {
	// Path is where the dependent stores the target's name.
	Path fieldpath.Reference
	// Target is the protected resource as its provider serves it, through
	// which targets are read. Its Export is the zero key while the
	// workspace of the protected APIExport does not bind the dependencies
	// APIExport; such a reference protects nothing yet.
	Target index.Source
}

// Entry is what Find returns: a dependent type that references the target,
// with every path at which one rule says it does.
type Entry struct {
	// Rule identifies the rule, for logs and audit annotations.
	Rule kcp.ObjectKey
	// Dependent is the resource holding references.
	Dependent index.Source
	// DependentKind is the kind of the dependent.
	DependentKind string
	// Paths are the field paths that hold the target's name, sorted.
	Paths []fieldpath.Reference
	// Target is the protected resource as its provider serves it, in the
	// version the rule names: through it deferred deletions are recorded
	// and replayed.
	Target index.Source
	// Replay is set when the rule defers deletions (see Rule.Replay).
	Replay bool
	// Tracking is what the rule's ReferencesTracked condition says.
	Tracking Tracking
}

// Protection is a protected resource of one provider: what the webhook
// lists to find the deferred deletions recorded on its objects.
type Protection struct {
	// Target is the protected resource.
	Target Target
	// Source is how its objects are read: its APIExport and the version of
	// the resource that the first of the rules names (objects are the same
	// in every version).
	Source index.Source
	// Replay is set when a rule that protects it defers deletions; the
	// records on objects of a resource without one are removed.
	Replay bool
}

// Labelling is how the dependents of a type are labelled with what they
// reference (see package reflabels): the scheme of all rules of the type,
// or why they are not labelled.
type Labelling struct {
	// Dependent is the dependent type as its provider serves it; set when
	// Labellable.
	Dependent index.Source
	// Scheme is the scheme of every rule of the type; set when Labellable.
	Scheme reflabels.Scheme
	// Labellable is set when the dependents can be labelled: every rule of
	// the type names the same APIExport and version, and no reference lies
	// in the status (a status subresource discards label changes, so a
	// reference written through it could not be labelled).
	Labellable bool
	// Reason says why the dependents are not labelled, if they are not.
	Reason string
	// Labelled is set when every rule of the type reports that the
	// dependents are labelled (DependentsLabelled=True): then a confirming
	// read selects by label. Until they are, reading every dependent in
	// scope costs less than a read by label plus a read of everything not
	// labelled.
	Labelled bool
	// Rules are the rules of the type, sorted.
	Rules []kcp.ObjectKey
}

// FromDependencyRule extracts the metadata of a rule.
func FromDependencyRule(rule *depv1alpha1.DependencyRule) *Rule {
	key := kcp.KeyOf(rule)
	r := &Rule{
		Key:             key,
		UID:             rule.UID,
		ResourceVersion: rule.ResourceVersion,
		Generation:      rule.Generation,
		Terminating:     rule.DeletionTimestamp != nil,
		Labelled:        meta.IsStatusConditionTrue(rule.Status.Conditions, depv1alpha1.ConditionDependentsLabelled),
		Tracking:        trackingOf(rule),
		Dependent: index.Source{
			Export:   kcp.ObjectKey{Cluster: key.Cluster, Name: rule.Spec.Dependent.APIExportName},
			Resource: schema.GroupVersionResource{Group: rule.Spec.Dependent.Group, Version: rule.Spec.Dependent.Version, Resource: rule.Spec.Dependent.Resource},
		},
		DependentKind: rule.Spec.Dependent.Kind,
		Replay:        rule.Spec.DeletionPolicy == depv1alpha1.DeletionPolicyReplay,
	}
	for _, d := range rule.Spec.Dependencies {
		p, err := reflabels.ParseReference(d)
		if err != nil {
			r.Invalid = append(r.Invalid, d.FieldRef.Path)
			continue
		}
		r.References = append(r.References, Reference{
			Workspace: logicalcluster.NewPath(d.APIExportRef.Path),
			Export:    d.APIExportRef.Name,
			Target:    schema.GroupResource{Group: d.Group, Resource: d.Resource},
			Version:   d.Version,
			Path:      p,
		})
	}
	return r
}

// Listing is a complete listing of the rules of some logical clusters (those
// of one shard).
type Listing struct {
	// Rules are all rules of the listed clusters.
	Rules []*Rule
	// ResourceVersion is the resourceVersion of the list.
	ResourceVersion string
	// Covers reports whether the listing covers a logical cluster: a rule of
	// a covered cluster that is not listed is gone.
	Covers func(logicalcluster.Name) bool
}

// record is the registry's state for one key.
type record struct {
	rule *Rule
	// seenByCache is set when the rule came through the manager's cache, so
	// that the cache no longer having it proves that it was deleted.
	seenByCache bool
}

// Registry is a thread-safe store of rule metadata. The zero value is not
// usable; call New.
type Registry struct {
	lock       sync.Mutex
	records    map[kcp.ObjectKey]record
	tombstones map[types.UID]time.Time // deleted rules, until when they are remembered
	// workspaces maps the path of every workspace that binds the APIExport
	// to its logical cluster (the kcp.io/path annotation of its binding).
	workspaces map[string]logicalcluster.Name
	sources    func(map[index.Source][]fieldpath.Reference)
	now        func() time.Time
	current    atomic.Pointer[snapshot]
	changed    chan struct{}
}

// New returns an empty registry.
func New() *Registry {
	r := &Registry{
		records:    map[kcp.ObjectKey]record{},
		tombstones: map[types.UID]time.Time{},
		workspaces: map[string]logicalcluster.Name{},
		now:        time.Now,
		changed:    make(chan struct{}, 1),
	}
	r.current.Store(&snapshot{byTarget: map[Target][]Entry{}, guards: map[Target][]Guard{}, guardOf: map[kcp.ObjectKey]Guard{}})
	return r
}

// OnSourcesChange calls fn with the dependent sources of all rules, and the
// paths to read of each, now and whenever the registry changes. Call it
// before anything is registered.
func (r *Registry) OnSourcesChange(fn func(map[index.Source][]fieldpath.Reference)) {
	r.lock.Lock()
	defer r.lock.Unlock()
	r.sources = fn
	r.publish()
}

// SetWorkspace records that the workspace at path (logical cluster
// cluster) binds the APIExport.
func (r *Registry) SetWorkspace(path string, cluster logicalcluster.Name) {
	r.lock.Lock()
	defer r.lock.Unlock()
	if path == "" || r.workspaces[path] == cluster {
		return
	}
	r.workspaces[path] = cluster
	r.publish()
}

// SetWorkspaces replaces what SetWorkspace recorded with a complete map.
func (r *Registry) SetWorkspaces(workspaces map[string]logicalcluster.Name) {
	r.lock.Lock()
	defer r.lock.Unlock()
	if maps.Equal(workspaces, r.workspaces) {
		return
	}
	r.workspaces = maps.Clone(workspaces)
	r.publish()
}

// newer reports whether resourceVersion a is newer than b. Both must be
// versions of DependencyRules (objects or lists) of one shard. A version
// that is not well-formed counts as newer, so that it is never ignored.
func newer(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || c > 0
}

// Apply registers or replaces a rule that the manager's cache holds. It is
// ignored if the registry holds the same or a newer version, or if the rule
// is known to be deleted, and reports whether it changed anything.
func (r *Registry) Apply(rule *Rule) bool {
	r.lock.Lock()
	defer r.lock.Unlock()
	if !r.apply(rule, true) {
		return false
	}
	r.publish()
	return true
}

func (r *Registry) apply(rule *Rule, viaCache bool) bool {
	if _, deleted := r.tombstones[rule.UID]; deleted && rule.UID != "" {
		return false
	}
	old, ok := r.records[rule.Key]
	if ok && !newer(rule.ResourceVersion, old.rule.ResourceVersion) {
		if viaCache && old.rule.UID == rule.UID && !old.seenByCache {
			old.seenByCache = true
			r.records[rule.Key] = old
		}
		return false
	}
	if ok && old.rule.UID != rule.UID {
		// A newer object of the same name: the old one is deleted.
		r.bury(old.rule.UID)
	}
	r.records[rule.Key] = record{rule: rule, seenByCache: viaCache}
	return true
}

// Forget removes the rule with the given key, which the manager's cache no
// longer holds. If the registry's version of it came through the cache, it is
// deleted for sure and its UID is remembered; otherwise the cache may not
// have seen it yet, and it will be registered again when it does.
func (r *Registry) Forget(key kcp.ObjectKey) bool {
	r.lock.Lock()
	defer r.lock.Unlock()
	old, ok := r.records[key]
	if !ok {
		return false
	}
	if old.seenByCache {
		r.bury(old.rule.UID)
	}
	delete(r.records, key)
	r.publish()
	return true
}

// ForgetCluster removes every rule of a logical cluster that stopped binding
// the APIExport. No tombstones are left: should the cluster still bind it
// after all, its rules are registered again as the cache sees them.
func (r *Registry) ForgetCluster(cluster logicalcluster.Name) {
	r.lock.Lock()
	defer r.lock.Unlock()
	changed := false
	for key := range r.records {
		if key.Cluster == cluster {
			delete(r.records, key)
			changed = true
		}
	}
	for path, c := range r.workspaces {
		if c == cluster {
			delete(r.workspaces, path)
			changed = true
		}
	}
	if changed {
		r.publish()
	}
}

// Sync applies a complete listing: every listed rule is applied, and every
// rule of a covered cluster that the listing does not contain, and that the
// registry knows in a version no newer than the listing, is deleted (and its
// UID remembered).
func (r *Registry) Sync(l Listing) {
	r.lock.Lock()
	defer r.lock.Unlock()
	listed := make(map[kcp.ObjectKey]bool, len(l.Rules))
	for _, rule := range l.Rules {
		listed[rule.Key] = true
		r.apply(rule, false)
	}
	for key, rec := range r.records {
		if listed[key] || !l.Covers(key.Cluster) || newer(rec.rule.ResourceVersion, l.ResourceVersion) {
			continue
		}
		r.bury(rec.rule.UID)
		delete(r.records, key)
	}
	now := r.now()
	for uid, until := range r.tombstones {
		if now.After(until) {
			delete(r.tombstones, uid)
		}
	}
	r.publish()
}

// bury remembers that the rule with this UID is deleted. Callers hold the lock.
func (r *Registry) bury(uid types.UID) {
	if uid != "" {
		r.tombstones[uid] = r.now().Add(tombstoneTTL)
	}
}

// Find returns the entries for rules that protect the target. The result is
// shared and must not be modified.
func (r *Registry) Find(target Target) []Entry {
	return r.current.Load().byTarget[target]
}

// FindGuards returns the rules whose dependent is the resource of dependent
// as the workspace dependent.Cluster serves it. The result is shared and
// must not be modified.
func (r *Registry) FindGuards(dependent Target) []Guard {
	return r.current.Load().guards[dependent]
}

// GuardOf returns the guard of the registered rule with the given key.
func (r *Registry) GuardOf(key kcp.ObjectKey) (Guard, bool) {
	g, ok := r.current.Load().guardOf[key]
	return g, ok
}

// Protections returns every protected resource whose provider workspace
// binds the dependencies APIExport, sorted. The result is shared and must
// not be modified.
func (r *Registry) Protections() []Protection {
	return r.current.Load().protections
}

// Labelling returns how the dependents of the resource of dependent, as
// the workspace dependent.Cluster serves it, are labelled, and false if no
// rule names it.
func (r *Registry) Labelling(dependent Target) (Labelling, bool) {
	l, ok := r.current.Load().labelling[dependent]
	return l, ok
}

// Labellings returns how the dependents of every dependent type are
// labelled, by the workspace that serves the type and its resource. The
// result is shared and must not be modified.
func (r *Registry) Labellings() map[Target]Labelling {
	return r.current.Load().labelling
}

// Rules returns the registered rules.
func (r *Registry) Rules() []*Rule {
	r.lock.Lock()
	defer r.lock.Unlock()
	rules := make([]*Rule, 0, len(r.records))
	for _, rec := range r.records {
		rules = append(rules, rec.rule)
	}
	return rules
}

// Changes receives a value whenever the registered rules may have changed.
func (r *Registry) Changes() <-chan struct{} {
	return r.changed
}

// Len returns the number of registered rules.
func (r *Registry) Len() int {
	return r.current.Load().rules
}
