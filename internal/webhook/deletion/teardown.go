package deletion

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/cycles"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/horizon"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/message"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/teardown"
)

// AuditCycle is the audit annotation that names the objects of a cycle of
// references that kcp's teardown deletes although they reference each
// other.
const AuditCycle = "cycle"

// groups finds the dependent groups of the rules that protect an object,
// once per type and namespace for one decision. It is what the decisions
// on cycles read of the index (cycles.Index).
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
func (g *groups) of(n cycles.Node) []*dependentGroup {
	k := groupsKey{provider: n.Provider, resource: n.Resource, namespace: n.Meta.Namespace}
	found, ok := g.found[k]
	if !ok {
		found = g.v.groupByDependent(g.v.rules.Find(registry.Target{Cluster: n.Provider, Resource: n.Resource}), n.Meta.Namespace)
		g.found[k] = found
	}
	return found
}

// Referrers returns the dependents in the index that reference n and
// would deny its deletion.
func (g *groups) Referrers(n cycles.Node) []cycles.Node {
	self := selfRef{target: n.Resource, namespace: n.Meta.Namespace, name: n.Meta.Name, uid: n.Meta.UID}
	var out []cycles.Node
	for _, dg := range g.of(n) {
		for _, m := range g.v.blocking(dg, self, g.v.dependents.Hits(dg.src, dg.paths, n.Meta.Cluster, dg.namespace, n.Meta.Name)) {
			if m.Cluster.Empty() {
				m.Cluster = n.Meta.Cluster
			}
			out = append(out, cycles.Node{Provider: dg.src.Export.Cluster, Resource: dg.src.Resource.GroupResource(), Kind: dg.kind, Meta: m})
		}
	}
	return out
}

// HoldsReferrers reports whether the index holds every dependent that may
// reference n, an object that a teardown under way deletes, as for an item
// of a teardown (see fromIndexOnly): every dependent type that may
// reference it is synced, and either the type is namespaced and references
// within its namespace, which is being deleted (local), or the index has
// caught up with a fence read after the teardown began. If not, it says
// why.
func (g *groups) HoldsReferrers(ctx context.Context, scope *teardown.Scope, n cycles.Node) (complete, local bool, why string) {
	terminating := false
	if n.Meta.Namespace != "" {
		terminating, _ = scope.Terminating(ctx, n.Meta.Namespace)
	}
	local = true
	for _, dg := range g.of(n) {
		if !dg.synced {
			return false, false, fmt.Sprintf("the index of %s is not synced", dg.kind)
		}
		if terminating && g.v.dependents.State(dg.src).Namespaced && !slices.ContainsFunc(dg.paths, fieldpath.Reference.CrossesNamespaces) {
			continue
		}
		local = false
		q := index.Query{Source: dg.src, Paths: dg.paths, Cluster: n.Meta.Cluster, Namespace: dg.namespace, Name: n.Meta.Name, Target: n.Resource, Scheme: dg.scheme}
		fenced, err := g.v.dependents.Fenced(ctx, q, scope.Begun)
		if err != nil || !fenced {
			why := fmt.Sprintf("the index has caught up with the teardown for every %s that may reference %s", dg.kind, n)
			if err != nil {
				why = fmt.Sprintf("%s (%v)", why, err)
			}
			return false, false, why
		}
	}
	return true, local, ""
}

// decideTeardown decides an item of kcp's teardown that the index says
// blockers reference. The item waits for its blockers (dependency order),
// unless it is on a cycle of references that the teardown deletes whole
// (see cycles.Breaker.Decide) and no reference to it is in flight: then it
// goes, and the cycle is remembered as broken. Where the teardown must
// wait for an object outside it, the denial (which kcp copies into the
// namespace's NamespaceDeletionContentFailure condition) and an Event say
// which and why.
func (v *Validator) decideTeardown(ctx context.Context, d *deletion, blockers []cycles.Node) (admission.Response, decision) {
	allowed := decision{outcome: webhook.DecisionAllowed, via: viaTeardown}
	denied := decision{outcome: webhook.DecisionDenied, via: viaIndex}
	ctx, cancel := webhook.WithBudget(ctx, v.timeout)
	defer cancel()
	self := cycles.Node{Provider: d.obj.Provider, Resource: d.target, Kind: d.req.Kind.Kind, Meta: d.obj.Meta}
	scope := v.scope(d)

	start := v.now()
	c := v.cycles.Decide(ctx, scope, self, blockers)
	if c.Cycle == "" {
		if c.Note != "" {
			d.denial.note = c.Note
		}
		return v.denyTeardown(ctx, d, scope, blockers, c.WaitsOutside), denied
	}
	if v.referenceInFlight(ctx, d) {
		d.denial.note = "; a reference to it is in flight"
		return v.deny(ctx, d.denial), denied
	}
	if c.Remembered {
		d.logger.V(1).Info("Deleting an object of a cycle of references that kcp's teardown broke", "cycle", c.Cycle)
		return v.allowOnCycle(ctx, d, scope, c.Cycle), allowed
	}
	v.metrics.CycleBroken()
	d.logger.Info("Broke a cycle of references that kcp's teardown deletes whole", "objects", c.Objects, "graph", c.Graph, "cycle", c.Cycle, "took", v.now().Sub(start))
	v.cycles.Remember(c)
	return v.allowOnCycle(ctx, d, scope, c.Cycle), allowed
}

// referenceInFlight reports whether the ledger of the object being deleted
// says that a reference to it may be in flight (see settle), once the
// leases on it have ended (see unleased).
func (v *Validator) referenceInFlight(ctx context.Context, d *deletion) bool {
	if v.horizon == nil {
		return false
	}
	h := v.unleased(ctx, d, horizon.Read(d.req.OldObject.Raw))
	if h.Malformed {
		return false
	}
	a := h.Ledger.Assess(v.now(), h.Created, v.horizon.Landed(d.horizonGroups()))
	return len(a.InFlight) > 0 || a.FloorInFlight
}

// TearingDown reports whether an item of kcp's teardowns of an object of
// resource in namespace (empty for a cluster-scoped one) of cluster reached
// this webhook within teardown.UnderwayFor: kcp is deleting every such
// object. The clearer leaves those alone.
func (v *Validator) TearingDown(cluster logicalcluster.Name, namespace string, resource schema.GroupResource) bool {
	return v.underway.Deleting(cluster, namespace, resource)
}

// scope returns what a teardown under way in the workspace of d deletes,
// asking kcp through the virtual workspace of the protected resource.
func (v *Validator) scope(d *deletion) *teardown.Scope {
	var probe teardown.Probe
	if v.namespaces != nil {
		probe = func(ctx context.Context, namespace string) (bool, error) {
			return v.namespaces.NamespaceTerminating(ctx, d.denial.source, d.obj.Cluster, namespace)
		}
	}
	s := teardown.NewScope(probe)
	s.Begun = d.begun
	return s
}

// denyTeardown denies an item of kcp's teardown. Unless the note says
// otherwise, it names the blockers that no teardown under way deletes, as
// far as kcp says. If the teardown waits for an object outside it, it
// records an Event.
func (v *Validator) denyTeardown(ctx context.Context, d *deletion, scope *teardown.Scope, blockers []cycles.Node, waitsOutside bool) admission.Response {
	var outside []string
	for _, b := range blockers {
		if deletes, why := scope.Deletes(ctx, b.Meta.Namespace); !deletes && scope.Answered(ctx, b.Meta.Namespace) {
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
