package deletion

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/horizon"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/message"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/teardown"
)

// MaxTeardownGraph bounds the objects that the decision on an item of
// kcp's teardown looks at: the object and those that reference it,
// directly or through others. Past it, no cycle through the object is
// broken, and the denial says so.
const MaxTeardownGraph = 100_000

// brokenTTL is how long a broken cycle is remembered, as long as a
// namespace found being deleted is (see objects.Client).
const brokenTTL = 10 * time.Minute

// maxNamed bounds how many objects of a cycle a warning, an audit
// annotation or a denial names; the rest are counted.
const maxNamed = 20

// AuditCycle is the audit annotation that names the objects of a cycle of
// references that kcp's teardown deletes although they reference each
// other.
const AuditCycle = "cycle"

// node is an object in the graph of references: which provider serves it,
// its resource and kind, and its metadata.
type node struct {
	provider logicalcluster.Name
	resource schema.GroupResource
	kind     string
	meta     kcp.Meta
}

// nodeKey identifies an object among those of every workspace.
type nodeKey struct {
	cluster         logicalcluster.Name
	resource        schema.GroupResource
	namespace, name string
}

// key identifies a node.
func (n node) key() nodeKey {
	return nodeKey{cluster: n.meta.Cluster, resource: n.resource, namespace: n.meta.Namespace, name: n.meta.Name}
}

func (n node) String() string {
	kind := n.kind
	if kind == "" {
		kind = n.resource.String()
	}
	return message.Blocker{Kind: kind, Namespace: n.meta.Namespace, Name: n.meta.Name}.String()
}

// compareNodes orders the objects of a cycle for messages: by namespace
// first (cluster-scoped objects first), then group, resource and name.
func compareNodes(a, b node) int {
	return cmp.Or(cmp.Compare(a.meta.Namespace, b.meta.Namespace), cmp.Compare(a.resource.Group, b.resource.Group),
		cmp.Compare(a.resource.Resource, b.resource.Resource), cmp.Compare(a.meta.Name, b.meta.Name))
}

// groups finds the dependent groups of the rules that protect an object,
// once per type and namespace for one decision.
type groups struct {
	v     *Validator
	found map[groupsKey][]*dependentGroup
}

type groupsKey struct {
	provider  logicalcluster.Name
	resource  schema.GroupResource
	namespace string
}

func (v *Validator) groups() *groups {
	return &groups{v: v, found: map[groupsKey][]*dependentGroup{}}
}

// of returns the dependent groups of the rules that protect n.
func (g *groups) of(n node) []*dependentGroup {
	k := groupsKey{provider: n.provider, resource: n.resource, namespace: n.meta.Namespace}
	found, ok := g.found[k]
	if !ok {
		found = g.v.groupByDependent(g.v.rules.Find(registry.Target{Cluster: n.provider, Resource: n.resource}), n.meta.Namespace)
		g.found[k] = found
	}
	return found
}

// referrersOf returns the dependents in the index that reference n and
// would deny its deletion.
func (v *Validator) referrersOf(groups *groups, n node) []node {
	self := selfRef{target: n.resource, namespace: n.meta.Namespace, name: n.meta.Name, uid: n.meta.UID}
	var out []node
	for _, g := range groups.of(n) {
		for _, m := range v.blocking(g, self, v.dependents.Hits(g.src, g.paths, n.meta.Cluster, g.namespace, n.meta.Name)) {
			if m.Cluster.Empty() {
				m.Cluster = n.meta.Cluster
			}
			out = append(out, node{provider: g.src.Export.Cluster, resource: g.src.Resource.GroupResource(), kind: g.kind, meta: m})
		}
	}
	return out
}

// outsider is an object that references, directly or through others, an
// object of a cycle, and that no teardown under way deletes.
type outsider struct {
	node
	// references is an object it references in the graph.
	references node
	// why it is not deleted.
	why string
}

// cycleNote is what a denial of an item of kcp's teardown says about the
// cycle of references it is on, when the teardown cannot break it.
type cycleNote struct {
	members  []node
	outside  []outsider
	unproved string
}

// brokenCycle is what is remembered of a cycle that kcp's teardown broke
// (see decideTeardown).
type brokenCycle struct {
	description string
	// rules fingerprints the rules that protect each type of the graph.
	rules map[registry.Target]string
	// open are the objects of the graph that objects outside their
	// namespace may come to reference: those of a dependent type that is
	// cluster-scoped or references across namespaces may.
	open []node
}

// decideTeardown decides an item of kcp's teardown that the index says
// blockers reference. The item waits for its blockers (dependency order),
// unless it is on a cycle of references that the teardown deletes whole:
// then every object of the cycle would wait for another forever. An item
// may go although its blockers still reference it when
//
//   - every blocker is in its strongly connected component (the objects
//     that it references and that reference it, directly or through
//     others, in the index), which holds more than the item: objects that
//     reference it from outside its cycle go first, as always;
//   - every object that references it, directly or through others (the
//     component, and whatever references the component), is deleted by a
//     teardown under way (see teardown.Scope): namespaced, in a namespace
//     kcp says is being deleted, or of any scope in a workspace being
//     deleted. An APIBinding's deletion cannot be told apart, and deletes
//     only the objects of its own resources: it breaks no cycle;
//   - the index holds every dependent that may reference each of those
//     objects (as for a teardown item it holds no blocker of, see
//     fromIndexOnly), and no reference to the item is in flight.
//
// Then deleting the objects of the component in any order loses no
// reference that outlives the teardown. The component is remembered as
// broken (see stillBroken): each of its objects then goes as soon as only
// other objects of it reference it, so that the component does not decay
// into a chain that kcp would tear down one object per pass. Where the
// teardown must wait for an object outside it, the denial (which kcp copies
// into the namespace's NamespaceDeletionContentFailure condition) and an
// Event say which and why.
func (v *Validator) decideTeardown(ctx context.Context, d *deletion, blockers []node) (admission.Response, decision) {
	allowed := decision{outcome: webhook.DecisionAllowed, via: viaTeardown}
	denied := decision{outcome: webhook.DecisionDenied, via: viaIndex}
	ctx, cancel := webhook.WithBudget(ctx, v.timeout)
	defer cancel()
	self := node{provider: d.obj.Provider, resource: d.target, kind: d.req.Kind.Kind, meta: d.obj.Meta}
	scope := v.scope(d)

	start := v.now()
	if description, ok := v.stillBroken(ctx, scope, self, blockers); ok {
		if v.referenceInFlight(d) {
			d.denial.note = "; a reference to it is in flight"
			return v.deny(ctx, d.denial), denied
		}
		d.logger.V(1).Info("Deleting an object of a cycle of references that kcp's teardown broke", "cycle", description)
		return v.allowOnCycle(ctx, d, scope, description), allowed
	}

	groups := v.groups()
	nodes := map[nodeKey]node{self.key(): self}
	g, err := teardown.Explore(self.key(), func(k nodeKey) []nodeKey {
		next := blockers
		if k != self.key() {
			next = v.referrersOf(groups, nodes[k])
		}
		keys := make([]nodeKey, len(next))
		for i, n := range next {
			keys[i] = n.key()
			if _, seen := nodes[keys[i]]; !seen {
				nodes[keys[i]] = n
			}
		}
		return keys
	}, MaxTeardownGraph)
	if err != nil {
		d.denial.note = fmt.Sprintf("; no cycle of references through it is broken: %v", err)
		return v.denyTeardown(ctx, d, scope, blockers, false), denied
	}
	component := g.Component(self.key())
	inComponent := make(map[nodeKey]bool, len(component))
	for _, k := range component {
		inComponent[k] = true
	}
	if len(component) < 2 || !allIn(blockers, func(k nodeKey) bool { return inComponent[k] }) {
		return v.denyTeardown(ctx, d, scope, blockers, false), denied
	}
	members := make([]node, len(component))
	for i, k := range component {
		members[i] = nodes[k]
	}
	slices.SortFunc(members, compareNodes)

	note := cycleNote{members: members}
	for _, k := range g.Nodes() {
		n := nodes[k]
		if deletes, why := scope.Deletes(ctx, n.meta.Namespace); !deletes {
			o := outsider{node: n, why: why}
			if refs := g.Referencing(k); len(refs) > 0 {
				o.references = nodes[refs[0]]
			}
			note.outside = append(note.outside, o)
		}
	}
	broken := &brokenCycle{description: v.nameCycle(members), rules: map[registry.Target]string{}}
	if len(note.outside) == 0 {
		for _, k := range g.Nodes() {
			n := nodes[k]
			complete, local, why := v.indexHoldsReferrers(ctx, scope, groups, n)
			if !complete {
				note.unproved = why
				break
			}
			if !local {
				broken.open = append(broken.open, n)
			}
			t := registry.Target{Cluster: n.provider, Resource: n.resource}
			if _, ok := broken.rules[t]; !ok {
				broken.rules[t] = v.rulesOf(t)
			}
		}
	}
	if len(note.outside) > 0 || note.unproved != "" {
		d.denial.note = v.describeCycle(ctx, scope, d.obj.Namespace, note)
		outside := slices.ContainsFunc(note.outside, func(o outsider) bool { return scope.Answered(ctx, o.meta.Namespace) })
		return v.denyTeardown(ctx, d, scope, blockers, outside), denied
	}
	if v.referenceInFlight(d) {
		d.denial.note = "; a reference to it is in flight"
		return v.deny(ctx, d.denial), denied
	}

	v.metrics.CycleBroken()
	d.logger.Info("Broke a cycle of references that kcp's teardown deletes whole", "objects", len(members), "graph", g.Len(), "cycle", broken.description, "took", v.now().Sub(start))
	v.broken.Remember(component, broken)
	return v.allowOnCycle(ctx, d, scope, broken.description), allowed
}

// stillBroken reports whether self is an object of a cycle that kcp's
// teardown broke a moment ago, which nothing but other objects of the
// cycle references (its blockers), and returns the cycle's description.
// That the teardown still deletes every object that references an object
// of the cycle holds while the rules that protect the types of its graph
// are the same, and nothing that no teardown under way deletes has come to
// reference an object of it from outside its namespace (nothing can come
// to reference one from inside: kcp creates nothing in a namespace being
// deleted). Where it no longer holds, the cycle is forgotten.
func (v *Validator) stillBroken(ctx context.Context, scope *teardown.Scope, self node, blockers []node) (string, bool) {
	in, c, ok := v.broken.Members(self.key())
	if !ok || !allIn(blockers, in) {
		return "", false
	}
	valid := func() bool {
		for t, fingerprint := range c.rules {
			if v.rulesOf(t) != fingerprint {
				return false
			}
		}
		groups := v.groups()
		for _, n := range c.open {
			for _, r := range v.referrersOf(groups, n) {
				if deletes, _ := scope.Deletes(ctx, r.meta.Namespace); !deletes {
					return false
				}
			}
		}
		return true
	}
	if !valid() {
		v.broken.Forget(self.key())
		return "", false
	}
	return c.description, true
}

// rulesOf fingerprints the rules that protect t: which dependent types
// reference it at which paths.
func (v *Validator) rulesOf(t registry.Target) string {
	entries := v.rules.Find(t)
	parts := make([]string, 0, len(entries))
	for _, e := range entries {
		paths := make([]string, len(e.Paths))
		for i, p := range e.Paths {
			paths[i] = fmt.Sprint(p)
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", e.Rule, e.Dependent, strings.Join(paths, ",")))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// allIn reports whether every blocker is in.
func allIn(blockers []node, in func(nodeKey) bool) bool {
	for _, b := range blockers {
		if !in(b.key()) {
			return false
		}
	}
	return true
}

// indexHoldsReferrers reports whether the index holds every dependent that
// may reference n, an object that a teardown under way deletes, as for an
// item of a teardown (see fromIndexOnly): every dependent type that may
// reference it is synced, and either the type is namespaced and references
// within its namespace, which is being deleted (local), or the index has
// caught up with a fence read after the teardown began. If not, it says why.
func (v *Validator) indexHoldsReferrers(ctx context.Context, scope *teardown.Scope, groups *groups, n node) (complete, local bool, why string) {
	terminating := false
	if n.meta.Namespace != "" {
		terminating, _ = scope.Terminating(ctx, n.meta.Namespace)
	}
	local = true
	for _, g := range groups.of(n) {
		if !g.synced {
			return false, false, fmt.Sprintf("the index of %s is not synced", g.kind)
		}
		if terminating && v.dependents.State(g.src).Namespaced && !slices.ContainsFunc(g.paths, fieldpath.Reference.CrossesNamespaces) {
			continue
		}
		local = false
		q := index.Query{Source: g.src, Paths: g.paths, Cluster: n.meta.Cluster, Namespace: g.namespace, Name: n.meta.Name, Target: n.resource, Scheme: g.scheme}
		fenced, err := v.dependents.Fenced(ctx, q)
		if err != nil || !fenced {
			why := fmt.Sprintf("the index has caught up with the teardown for every %s that may reference %s", g.kind, n)
			if err != nil {
				why = fmt.Sprintf("%s (%v)", why, err)
			}
			return false, false, why
		}
	}
	return true, local, ""
}

// referenceInFlight reports whether the ledger of the object being deleted
// says that a reference to it may be in flight (see settle).
func (v *Validator) referenceInFlight(d *deletion) bool {
	if v.horizon == nil {
		return false
	}
	h := horizon.Read(d.req.OldObject.Raw)
	if h.Malformed {
		return false
	}
	a := h.Ledger.Assess(v.now(), h.Created, v.horizon.Landed(d.horizonGroups()))
	return len(a.InFlight) > 0 || a.FloorInFlight
}

// scope returns what a teardown under way in the workspace of d deletes,
// asking kcp through the virtual workspace of the protected resource.
func (v *Validator) scope(d *deletion) *teardown.Scope {
	if v.namespaces == nil {
		return teardown.NewScope(nil)
	}
	return teardown.NewScope(func(ctx context.Context, namespace string) (bool, error) {
		return v.namespaces.NamespaceTerminating(ctx, d.denial.source, d.obj.Cluster, namespace)
	})
}

// nameCycle names the objects of a cycle, at most maxNamed of them.
func (v *Validator) nameCycle(members []node) string {
	names := make([]string, 0, min(len(members), maxNamed))
	for i, n := range members {
		if i == maxNamed {
			return fmt.Sprintf("%s and %d more", strings.Join(names, ", "), len(members)-maxNamed)
		}
		names = append(names, n.String())
	}
	return strings.Join(names, ", ")
}

// describeCycle says why the teardown cannot break a cycle (yet).
func (v *Validator) describeCycle(ctx context.Context, scope *teardown.Scope, namespace string, note cycleNote) string {
	name, known := scope.Name(ctx, namespace)
	cycle := v.nameCycle(note.members)
	if note.unproved != "" {
		return fmt.Sprintf("; it is on a cycle of references (%s), which %s deletes once %s", cycle, name, note.unproved)
	}
	var b strings.Builder
	if known {
		fmt.Fprintf(&b, "; it is on a cycle of references (%s), which %s can break only if it deletes every object of the cycle and every object that references one; outside it: ", cycle, name)
	} else {
		fmt.Fprintf(&b, "; it is on a cycle of references (%s), which only the deletion of the namespaces or the workspace of its objects breaks (an APIBinding's deletion deletes only the objects of its own resources); not being deleted: ", cycle)
	}
	members := map[nodeKey]bool{}
	for _, m := range note.members {
		members[m.key()] = true
	}
	slices.SortFunc(note.outside, func(a, b outsider) int { return compareNodes(a.node, b.node) })
	for i, o := range note.outside {
		if i == v.maxBlockers {
			fmt.Fprintf(&b, "; and %d more", len(note.outside)-v.maxBlockers)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		if members[o.key()] {
			fmt.Fprintf(&b, "%s (%s)", o.node, o.why)
		} else {
			fmt.Fprintf(&b, "%s, which references %s (%s)", o.node, o.references, o.why)
		}
	}
	return b.String()
}

// denyTeardown denies an item of kcp's teardown. Unless the note says
// otherwise, it names the blockers that no teardown under way deletes, as
// far as kcp says. If the teardown waits for an object outside it, it
// records an Event.
func (v *Validator) denyTeardown(ctx context.Context, d *deletion, scope *teardown.Scope, blockers []node, waitsOutside bool) admission.Response {
	var outside []string
	for _, b := range blockers {
		if deletes, why := scope.Deletes(ctx, b.meta.Namespace); !deletes && scope.Answered(ctx, b.meta.Namespace) {
			outside = append(outside, fmt.Sprintf("%s (%s)", b, why))
		}
	}
	slices.Sort(outside)
	outside = slices.Compact(outside)
	if len(outside) > v.maxBlockers {
		outside = append(outside[:v.maxBlockers], fmt.Sprintf("%d more", len(outside)-v.maxBlockers))
	}
	if len(outside) > 0 && d.denial.note == "" {
		if name, known := scope.Name(ctx, d.obj.Namespace); known {
			d.denial.note = fmt.Sprintf("; %s waits for %s, outside it", name, strings.Join(outside, ", "))
		} else {
			d.denial.note = fmt.Sprintf("; no deletion of a namespace or the workspace under way deletes %s", strings.Join(outside, ", "))
		}
	}
	resp := v.deny(ctx, d.denial)
	if waitsOutside || len(outside) > 0 {
		v.recordWait(ctx, d, scope, resp.Result.Message)
	}
	return resp
}

// allowOnCycle allows an item of kcp's teardown on a cycle of references
// that the teardown deletes whole, warning and auditing which objects are
// on it.
func (v *Validator) allowOnCycle(ctx context.Context, d *deletion, scope *teardown.Scope, cycle string) admission.Response {
	blockers := slices.Clone(d.denial.blockers)
	slices.SortFunc(blockers, message.CompareBlockers)
	names := make([]string, 0, len(blockers))
	for _, b := range slices.Compact(blockers) {
		names = append(names, b.String())
	}
	name, _ := scope.Name(ctx, d.obj.Namespace)
	resp := admission.Allowed("").WithWarnings(fmt.Sprintf(
		"%s %q is deleted although %s still reference it: they reference each other in a cycle (%s), which %s deletes with every object that references it",
		d.target, d.obj.Name, strings.Join(names, ", "), cycle, name))
	resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionAllowed, AuditCycle: cycle}
	return resp
}
