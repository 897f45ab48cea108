// Package depgraph builds the graph of resource types that DependencyRules
// declare, with an edge from each dependent type to each type it references,
// and finds the cycles in it. A cycle means that objects of those types can
// protect each other from deletion, so that none of them can be deleted
// without the skip-protection annotation.
package depgraph

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Cycle is a closed path through the type graph. Its first type is repeated
// implicitly at the end: [A B] means A → B → A.
type Cycle []schema.GroupResource

// String renders the cycle with arrows, closing it, e.g.
// "virtualmachines.compute.example.io → vpcs.network.example.io → virtualmachines.compute.example.io".
func (c Cycle) String() string {
	parts := make([]string, 0, len(c)+1)
	for _, gr := range c {
		parts = append(parts, gr.String())
	}
	if len(c) > 0 {
		parts = append(parts, c[0].String())
	}
	return strings.Join(parts, " → ")
}

// canonical rotates the cycle to start at its smallest type, so that equal
// cycles compare equal.
func (c Cycle) canonical() Cycle {
	if len(c) == 0 {
		return c
	}
	first := 0
	for i := range c {
		if compareGR(c[i], c[first]) < 0 {
			first = i
		}
	}
	return append(append(Cycle{}, c[first:]...), c[:first]...)
}

type edge struct {
	from, to schema.GroupResource
}

// Graph is the type graph of a set of rules.
type Graph struct {
	// adjacency lists, sorted
	next map[schema.GroupResource][]schema.GroupResource
	// edges each rule contributes
	ruleEdges map[kcp.ObjectKey][]edge
}

// Build builds the type graph of the rules.
func Build(rules []depv1alpha1.DependencyRule) *Graph {
	g := &Graph{next: map[schema.GroupResource][]schema.GroupResource{}, ruleEdges: map[kcp.ObjectKey][]edge{}}
	for i := range rules {
		rule := &rules[i]
		from := schema.GroupResource{Group: rule.Spec.Dependent.Group, Resource: rule.Spec.Dependent.Resource}
		k := kcp.KeyOf(rule)
		for _, dep := range rule.Spec.Dependencies {
			to := schema.GroupResource{Group: dep.Group, Resource: dep.Resource}
			g.next[from] = append(g.next[from], to)
			if _, ok := g.next[to]; !ok {
				g.next[to] = nil
			}
			g.ruleEdges[k] = append(g.ruleEdges[k], edge{from: from, to: to})
		}
	}
	for n := range g.next {
		slices.SortFunc(g.next[n], compareGR)
		g.next[n] = slices.Compact(g.next[n])
	}
	return g
}

// CyclesByRule returns, for every rule with an edge on a cycle, the cycles
// through its edges, each starting at the rule's dependent type. Rules
// without cycles are absent.
func (g *Graph) CyclesByRule() map[kcp.ObjectKey][]Cycle {
	component := g.components()
	result := map[kcp.ObjectKey][]Cycle{}
	for key, edges := range g.ruleEdges {
		var cycles []Cycle
		seen := map[string]bool{}
		for _, e := range edges {
			if component[e.from] != component[e.to] {
				continue
			}
			c := append(Cycle{e.from}, g.shortestPath(e.to, e.from, component)...)
			if id := c.canonical().String(); !seen[id] {
				seen[id] = true
				cycles = append(cycles, c)
			}
		}
		if len(cycles) > 0 {
			result[key] = cycles
		}
	}
	return result
}

// shortestPath returns the types on a shortest path from `from` to `to`
// within their strongly connected component, excluding `to` itself. For
// from == to (a type referencing itself) it returns nothing.
func (g *Graph) shortestPath(from, to schema.GroupResource, component map[schema.GroupResource]int) []schema.GroupResource {
	if from == to {
		return nil
	}
	prev := map[schema.GroupResource]schema.GroupResource{}
	visited := map[schema.GroupResource]bool{from: true}
	queue := []schema.GroupResource{from}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, m := range g.next[n] {
			if visited[m] || component[m] != component[from] {
				continue
			}
			visited[m] = true
			prev[m] = n
			if m == to {
				var path []schema.GroupResource
				for p := prev[to]; ; p = prev[p] {
					path = append([]schema.GroupResource{p}, path...)
					if p == from {
						return path
					}
				}
			}
			queue = append(queue, m)
		}
	}
	return nil // unreachable for nodes of one component
}

// components numbers the strongly connected components of the graph
// (Tarjan's algorithm). Nodes on a cycle share a number with the other nodes
// of that cycle; a node references itself if it has a self-edge.
func (g *Graph) components() map[schema.GroupResource]int {
	nodes := make([]schema.GroupResource, 0, len(g.next))
	for n := range g.next {
		nodes = append(nodes, n)
	}
	slices.SortFunc(nodes, compareGR)

	index := map[schema.GroupResource]int{}
	low := map[schema.GroupResource]int{}
	onStack := map[schema.GroupResource]bool{}
	component := map[schema.GroupResource]int{}
	var stack []schema.GroupResource
	next, count := 0, 0

	var visit func(n schema.GroupResource)
	visit = func(n schema.GroupResource) {
		index[n], low[n] = next, next
		next++
		stack = append(stack, n)
		onStack[n] = true
		for _, m := range g.next[n] {
			if _, seen := index[m]; !seen {
				visit(m)
				low[n] = min(low[n], low[m])
			} else if onStack[m] {
				low[n] = min(low[n], index[m])
			}
		}
		if low[n] == index[n] {
			for {
				m := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[m] = false
				component[m] = count
				if m == n {
					break
				}
			}
			count++
		}
	}
	for _, n := range nodes {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	return component
}

func compareGR(a, b schema.GroupResource) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource))
}
