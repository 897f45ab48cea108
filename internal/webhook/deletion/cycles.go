package deletion

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// maxCycleSearch bounds the objects the search for a cycle of references
// visits; beyond it, no cycle is broken.
const maxCycleSearch = 64

// AuditCycle is the audit annotation that names the objects of a cycle of
// references that kcp's teardown broke at the deleted object.
const AuditCycle = "cycle"

// node is an object in the graph of references: which provider serves it,
// its resource and kind, and its metadata.
type node struct {
	provider logicalcluster.Name
	resource schema.GroupResource
	kind     string
	meta     kcp.Meta
}

// key identifies a node.
func (n node) key() string {
	return n.resource.String() + "/" + n.meta.Namespace + "/" + n.meta.Name
}

func (n node) String() string {
	kind := n.kind
	if kind == "" {
		kind = n.resource.String()
	}
	return Blocker{Kind: kind, Namespace: n.meta.Namespace, Name: n.meta.Name}.String()
}

// compareNodes orders the objects of a cycle: by namespace first, so that
// a cluster-scoped object (no namespace) comes first, since only a
// teardown of the whole workspace sees a cycle through it whole; then by
// group, resource and name.
func compareNodes(a, b node) int {
	return cmp.Or(cmp.Compare(a.meta.Namespace, b.meta.Namespace), cmp.Compare(a.resource.Group, b.resource.Group),
		cmp.Compare(a.resource.Resource, b.resource.Resource), cmp.Compare(a.meta.Name, b.meta.Name))
}

// blockersOf returns the dependents in the index that reference n and would
// deny its deletion.
func (v *Validator) blockersOf(n node) []node {
	entries := v.rules.Find(registry.Target{Cluster: n.provider, Resource: n.resource})
	self := selfRef{target: n.resource, namespace: n.meta.Namespace, name: n.meta.Name, uid: n.meta.UID}
	var out []node
	for _, g := range v.groupByDependent(entries, n.meta.Namespace) {
		for _, m := range v.blocking(g, self, v.dependents.Hits(g.src, g.paths, n.meta.Cluster, g.namespace, n.meta.Name)) {
			if m.Cluster.Empty() {
				m.Cluster = n.meta.Cluster
			}
			out = append(out, node{provider: g.src.Export.Cluster, resource: g.src.Resource.GroupResource(), kind: g.kind, meta: m})
		}
	}
	return out
}

// breakCycle decides whether kcp's teardown of self, which the index says
// blockers reference, may delete self although they do: when self and its
// blockers reference each other in a cycle that lies within the teardown
// (in namespace, or anywhere in the workspace if namespace is empty), every
// object on it would wait for another forever. The cycle is broken at the
// object that sorts first (by namespace, group, resource and name) among
// the objects that reference each other (the strongly connected component
// of self in the graph of references): it is deleted first, and the others
// follow in dependency order. It returns the objects of the component, and
// true if self is where it breaks: every blocker of self is in the
// component, nothing outside the teardown references an object of it, and
// self sorts first. Only what the index holds is read.
func (v *Validator) breakCycle(self node, blockers []node, namespace string) ([]node, bool) {
	inScope := func(n node) bool {
		return n.meta.Cluster == self.meta.Cluster && (namespace == "" || n.meta.Namespace == namespace)
	}
	nodes := map[string]node{self.key(): self}
	edges := map[string][]string{}
	queue := []node{self}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		next := blockers
		if n.key() != self.key() {
			next = v.blockersOf(n)
		}
		for _, b := range next {
			if !inScope(b) {
				return nil, false
			}
			k := b.key()
			edges[n.key()] = append(edges[n.key()], k)
			if _, seen := nodes[k]; !seen {
				if len(nodes) == maxCycleSearch {
					return nil, false
				}
				nodes[k] = b
				queue = append(queue, b)
			}
		}
	}
	// The component of self: the nodes from which self can be reached
	// (every node was reached from self).
	reverse := map[string][]string{}
	for from, tos := range edges {
		for _, to := range tos {
			reverse[to] = append(reverse[to], from)
		}
	}
	component := map[string]bool{self.key(): true}
	stack := []string{self.key()}
	for len(stack) > 0 {
		k := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, from := range reverse[k] {
			if !component[from] {
				component[from] = true
				stack = append(stack, from)
			}
		}
	}
	members := make([]node, 0, len(component))
	for k := range component {
		members = append(members, nodes[k])
	}
	slices.SortFunc(members, compareNodes)
	for _, b := range blockers {
		if !component[b.key()] {
			return members, false
		}
	}
	return members, len(members) > 1 && members[0].key() == self.key()
}

// allowOnCycle allows an item of kcp's teardown that breaks a cycle of
// references, warning and auditing which objects were on it.
func (v *Validator) allowOnCycle(d *deletion, cycle []node) admission.Response {
	names := make([]string, len(cycle))
	for i, n := range cycle {
		names[i] = n.String()
	}
	v.metrics.CycleBroken()
	d.logger.Info("Broke a cycle of references in kcp's teardown: deleting the object that sorts first", "cycle", names)
	resp := admission.Allowed("").WithWarnings(fmt.Sprintf(
		"%s %q is deleted although %s still reference it: they reference each other in a cycle (%s), which the teardown breaks at the object that sorts first",
		d.target, d.obj.Name, strings.Join(names[1:], ", "), strings.Join(names, " → ")))
	resp.AuditAnnotations = map[string]string{webhook.AuditDecision: webhook.DecisionAllowed, AuditCycle: strings.Join(names, ",")}
	return resp
}
