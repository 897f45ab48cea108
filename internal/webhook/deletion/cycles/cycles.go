package cycles

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/message"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/teardown"
)

// MaxGraph bounds the objects that the decision on an item of kcp's
// teardown looks at: the object and those that reference it, directly or
// through others. Past it, no cycle through the object is broken, and the
// denial says so.
const MaxGraph = 100_000

// brokenTTL is how long a broken cycle is remembered, as long as a
// namespace found being deleted is (see objects.Client).
const brokenTTL = 10 * time.Minute

// maxNamed bounds how many objects of a cycle a warning, an audit
// annotation or a denial names; the rest are counted.
const maxNamed = 20

// Node is an object in the graph of references: which provider serves it,
// its resource and kind, and its metadata.
type Node struct {
	Provider logicalcluster.Name
	Resource schema.GroupResource
	Kind     string
	Meta     kcp.Meta
}

// key identifies an object among those of every workspace.
type key struct {
	cluster         logicalcluster.Name
	resource        schema.GroupResource
	namespace, name string
}

// key identifies a node.
func (n Node) key() key {
	return key{cluster: n.Meta.Cluster, resource: n.Resource, namespace: n.Meta.Namespace, name: n.Meta.Name}
}

// String names the object as a denial names a blocker.
func (n Node) String() string {
	kind := n.Kind
	if kind == "" {
		kind = n.Resource.String()
	}
	return message.Blocker{Kind: kind, Namespace: n.Meta.Namespace, Name: n.Meta.Name}.String()
}

// compareNodes orders the objects of a cycle for messages: by namespace
// first (cluster-scoped objects first), then group, resource and name.
func compareNodes(a, b Node) int {
	return cmp.Or(cmp.Compare(a.Meta.Namespace, b.Meta.Namespace), cmp.Compare(a.Resource.Group, b.Resource.Group),
		cmp.Compare(a.Resource.Resource, b.Resource.Resource), cmp.Compare(a.Meta.Name, b.Meta.Name))
}

// Index is what a decision reads of the index of references. A Breaker
// asks for one per graph it builds or proves again, which may cache what
// it reads (the rules that protect each type) for that while.
type Index interface {
	// Referrers returns the dependents in the index that reference n and
	// would deny its deletion.
	Referrers(n Node) []Node
	// HoldsReferrers reports whether the index holds every dependent that
	// may reference n, an object that a teardown under way deletes, as for
	// an item of a teardown that the index holds no blocker of: every
	// dependent type that may reference it is synced, and either the type
	// is namespaced and references within its namespace, which is being
	// deleted (local), or the index has caught up with a fence read after
	// the teardown began. If not, it says why.
	HoldsReferrers(ctx context.Context, scope *teardown.Scope, n Node) (complete, local bool, why string)
}

// Rules finds the rules that protect a resource; *registry.Registry
// implements it.
type Rules interface {
	Find(target registry.Target) []registry.Entry
}

// Breaker decides the items of kcp's teardowns that are on cycles of
// references (see Decide), and remembers the cycles it broke.
type Breaker struct {
	rules      Rules
	index      func() Index
	maxOutside int
	// broken remembers the cycles of references that kcp's teardowns
	// broke.
	broken *teardown.Broken[key, *brokenCycle]
}

// New returns a Breaker that finds the rules that protect a type in rules,
// reads the index through what index returns, and names at most
// maxOutside objects outside a cycle in a denial (the rest are counted).
func New(rules Rules, index func() Index, maxOutside int) *Breaker {
	return &Breaker{rules: rules, index: index, maxOutside: maxOutside, broken: teardown.NewBroken[key, *brokenCycle](brokenTTL)}
}

// outsider is an object that references, directly or through others, an
// object of a cycle, and that no teardown under way deletes.
type outsider struct {
	Node
	// references is an object it references in the graph.
	references Node
	// why it is not deleted.
	why string
}

// cycleNote is what a denial of an item of kcp's teardown says about the
// cycle of references it is on, when the teardown cannot break it.
type cycleNote struct {
	members  []Node
	outside  []outsider
	unproved string
}

// brokenCycle is what is remembered of a cycle that kcp's teardown broke
// (see Decide).
type brokenCycle struct {
	description string
	// rules fingerprints the rules that protect each type of the graph.
	rules map[registry.Target]string
	// open are the objects of the graph that objects outside their
	// namespace may come to reference: those of a dependent type that is
	// cluster-scoped or references across namespaces may.
	open []Node
}

// Decision is what Decide says of an item of kcp's teardown.
type Decision struct {
	// Cycle names the objects of the cycle of references through the item
	// that the teardown deletes whole, at most 20 of them; empty if the
	// item waits for its blockers.
	Cycle string
	// Remembered is set when the cycle was broken a moment ago and that
	// still holds.
	Remembered bool
	// Objects and Graph are the numbers of objects of a cycle found
	// broken now, and of its graph.
	Objects, Graph int
	// Note is what a denial of an item that waits adds about the cycle it
	// is on, if anything: why the teardown cannot break it (yet).
	Note string
	// WaitsOutside is set when the item waits for an object that no
	// teardown under way deletes, as far as kcp says.
	WaitsOutside bool

	component []key
	broken    *brokenCycle
}

// Decide decides an item of kcp's teardown, self, that the index says
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
//     objects (see Index.HoldsReferrers);
//
// and the caller knows of no reference to the item in flight. Then
// deleting the objects of the component in any order loses no reference
// that outlives the teardown. Once the caller allows the item, it
// remembers the component as broken (Remember): each of its objects then
// goes as soon as only other objects of it reference it (the Decision is
// Remembered), so that the component does not decay into a chain that kcp
// would tear down one object per pass. That holds while the rules that
// protect the types of its graph are the same, and nothing that no teardown
// under way deletes has come to reference an object of it from outside
// its namespace (nothing can come to reference one from inside: kcp
// creates nothing in a namespace being deleted); where it no longer holds,
// the cycle is forgotten.
func (b *Breaker) Decide(ctx context.Context, scope *teardown.Scope, self Node, blockers []Node) Decision {
	if description, ok := b.stillBroken(ctx, scope, self, blockers); ok {
		return Decision{Cycle: description, Remembered: true}
	}

	ix := b.index()
	nodes := map[key]Node{self.key(): self}
	g, err := teardown.Explore(self.key(), func(k key) []key {
		next := blockers
		if k != self.key() {
			next = ix.Referrers(nodes[k])
		}
		keys := make([]key, len(next))
		for i, n := range next {
			keys[i] = n.key()
			if _, seen := nodes[keys[i]]; !seen {
				nodes[keys[i]] = n
			}
		}
		return keys
	}, MaxGraph)
	if err != nil {
		return Decision{Note: fmt.Sprintf("; no cycle of references through it is broken: %v", err)}
	}
	component := g.Component(self.key())
	inComponent := make(map[key]bool, len(component))
	for _, k := range component {
		inComponent[k] = true
	}
	if len(component) < 2 || !allIn(blockers, func(k key) bool { return inComponent[k] }) {
		return Decision{}
	}
	members := make([]Node, len(component))
	for i, k := range component {
		members[i] = nodes[k]
	}
	slices.SortFunc(members, compareNodes)

	note := cycleNote{members: members}
	for _, k := range g.Nodes() {
		n := nodes[k]
		if deletes, why := scope.Deletes(ctx, n.Meta.Namespace); !deletes {
			o := outsider{Node: n, why: why}
			if refs := g.Referencing(k); len(refs) > 0 {
				o.references = nodes[refs[0]]
			}
			note.outside = append(note.outside, o)
		}
	}
	broken := &brokenCycle{description: nameCycle(members), rules: map[registry.Target]string{}}
	if len(note.outside) == 0 {
		for _, k := range g.Nodes() {
			n := nodes[k]
			complete, local, why := ix.HoldsReferrers(ctx, scope, n)
			if !complete {
				note.unproved = why
				break
			}
			if !local {
				broken.open = append(broken.open, n)
			}
			t := registry.Target{Cluster: n.Provider, Resource: n.Resource}
			if _, ok := broken.rules[t]; !ok {
				broken.rules[t] = b.rulesOf(t)
			}
		}
	}
	if len(note.outside) > 0 || note.unproved != "" {
		d := Decision{Note: b.describeCycle(ctx, scope, self.Meta.Namespace, note)}
		d.WaitsOutside = slices.ContainsFunc(note.outside, func(o outsider) bool { return scope.Answered(ctx, o.Meta.Namespace) })
		return d
	}
	return Decision{Cycle: broken.description, Objects: len(members), Graph: g.Len(), component: component, broken: broken}
}

// Remember remembers the cycle that d found broken (see Decide), for as
// long as a namespace found being deleted is remembered.
func (b *Breaker) Remember(d Decision) {
	if d.broken != nil {
		b.broken.Remember(d.component, d.broken)
	}
}

// stillBroken reports whether self is an object of a cycle that kcp's
// teardown broke a moment ago, which nothing but other objects of the
// cycle references (its blockers), and returns the cycle's description
// (see Decide for how long that holds). Where it no longer holds, the
// cycle is forgotten.
func (b *Breaker) stillBroken(ctx context.Context, scope *teardown.Scope, self Node, blockers []Node) (string, bool) {
	in, c, ok := b.broken.Members(self.key())
	if !ok || !allIn(blockers, in) {
		return "", false
	}
	valid := func() bool {
		for t, fingerprint := range c.rules {
			if b.rulesOf(t) != fingerprint {
				return false
			}
		}
		ix := b.index()
		for _, n := range c.open {
			for _, r := range ix.Referrers(n) {
				if deletes, _ := scope.Deletes(ctx, r.Meta.Namespace); !deletes {
					return false
				}
			}
		}
		return true
	}
	if !valid() {
		b.broken.Forget(self.key())
		return "", false
	}
	return c.description, true
}

// rulesOf fingerprints the rules that protect t: which dependent types
// reference it at which paths.
func (b *Breaker) rulesOf(t registry.Target) string {
	entries := b.rules.Find(t)
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
func allIn(blockers []Node, in func(key) bool) bool {
	for _, b := range blockers {
		if !in(b.key()) {
			return false
		}
	}
	return true
}

// nameCycle names the objects of a cycle, at most maxNamed of them.
func nameCycle(members []Node) string {
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
func (b *Breaker) describeCycle(ctx context.Context, scope *teardown.Scope, namespace string, note cycleNote) string {
	name, known := scope.Name(ctx, namespace)
	cycle := nameCycle(note.members)
	if note.unproved != "" {
		return fmt.Sprintf("; it is on a cycle of references (%s), which %s deletes once %s", cycle, name, note.unproved)
	}
	var s strings.Builder
	if known {
		fmt.Fprintf(&s, "; it is on a cycle of references (%s), which %s can break only if it deletes every object of the cycle and every object that references one; outside it: ", cycle, name)
	} else {
		fmt.Fprintf(&s, "; it is on a cycle of references (%s), which only the deletion of the namespaces or the workspace of its objects breaks (an APIBinding's deletion deletes only the objects of its own resources); not being deleted: ", cycle)
	}
	members := map[key]bool{}
	for _, m := range note.members {
		members[m.key()] = true
	}
	slices.SortFunc(note.outside, func(x, y outsider) int { return compareNodes(x.Node, y.Node) })
	for i, o := range note.outside {
		if i == b.maxOutside {
			fmt.Fprintf(&s, "; and %d more", len(note.outside)-b.maxOutside)
			break
		}
		if i > 0 {
			s.WriteString("; ")
		}
		if members[o.key()] {
			fmt.Fprintf(&s, "%s (%s)", o.Node, o.why)
		} else {
			fmt.Fprintf(&s, "%s, which references %s (%s)", o.Node, o.references, o.why)
		}
	}
	return s.String()
}
