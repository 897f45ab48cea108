package teardown

import (
	"errors"
	"fmt"
)

// ErrTooLarge is returned (wrapped) by Explore when more objects reference
// the start, directly or through others, than its limit.
var ErrTooLarge = errors.New("too many objects reference it")

// Graph is the graph of references around an object that a teardown would
// delete: the object, every object that references it, every object that
// references those, and so on. An edge runs from an object to each object
// that references it (its referrers), the way the index answers: who
// references an object, not what an object references. Every object of the
// graph is reached from the start.
type Graph[K comparable] struct {
	nodes     []K
	index     map[K]int
	referrers [][]int
	// component numbers the strongly connected components, computed on
	// first use.
	component []int
}

// Explore builds the graph of the objects that reference start, directly
// or through others, asking referrers for the referrers of each object
// once. It visits at most limit objects; past that it returns an error
// wrapping ErrTooLarge. Time and memory are proportional to the objects and
// references it visits.
func Explore[K comparable](start K, referrers func(K) []K, limit int) (*Graph[K], error) {
	g := &Graph[K]{nodes: []K{start}, index: map[K]int{start: 0}, referrers: [][]int{nil}}
	for i := 0; i < len(g.nodes); i++ {
		for _, r := range referrers(g.nodes[i]) {
			j, seen := g.index[r]
			if !seen {
				if len(g.nodes) == limit {
					return nil, fmt.Errorf("more than %d objects reference it, directly or through others: %w", limit, ErrTooLarge)
				}
				j = len(g.nodes)
				g.index[r] = j
				g.nodes = append(g.nodes, r)
				g.referrers = append(g.referrers, nil)
			}
			g.referrers[i] = append(g.referrers[i], j)
		}
	}
	return g, nil
}

// Len returns the number of objects in the graph.
func (g *Graph[K]) Len() int { return len(g.nodes) }

// Nodes returns the objects of the graph, the start first, in the order
// they were reached.
func (g *Graph[K]) Nodes() []K { return g.nodes }

// Contains reports whether k is in the graph.
func (g *Graph[K]) Contains(k K) bool {
	_, ok := g.index[k]
	return ok
}

// Referencing returns the objects of the graph that k references (k is
// among their referrers).
func (g *Graph[K]) Referencing(k K) []K {
	i, ok := g.index[k]
	if !ok {
		return nil
	}
	var out []K
	for j, rs := range g.referrers {
		for _, r := range rs {
			if r == i {
				out = append(out, g.nodes[j])
				break
			}
		}
	}
	return out
}

// Component returns the strongly connected component of k: the objects
// that k references, directly or through others, and that reference k the
// same way (k itself included). Objects on a cycle of references share
// their component; an object on none is alone in its own. It returns nil
// for an object not in the graph.
func (g *Graph[K]) Component(k K) []K {
	i, ok := g.index[k]
	if !ok {
		return nil
	}
	if g.component == nil {
		g.component = components(g.referrers)
	}
	var out []K
	for j, c := range g.component {
		if c == g.component[i] {
			out = append(out, g.nodes[j])
		}
	}
	return out
}

// components numbers the strongly connected components of the graph with
// the given adjacency lists (Tarjan's algorithm, without recursion, so that
// a long chain of references cannot exhaust the stack): two nodes share a
// number exactly when each can be reached from the other. Components are
// numbered in the order they complete, so a component's number is lower
// than that of every component that reaches it.
func components(edges [][]int) []int {
	n := len(edges)
	order := make([]int, n) // 0: not visited yet; otherwise the visit order, from 1
	low := make([]int, n)
	comp := make([]int, n)
	onStack := make([]bool, n)
	var stack []int
	// frame is a node being visited and the next of its edges to follow.
	type frame struct{ v, next int }
	var calls []frame
	visited, count := 0, 0
	visit := func(v int) {
		visited++
		order[v], low[v] = visited, visited
		stack = append(stack, v)
		onStack[v] = true
		calls = append(calls, frame{v: v})
	}
	for root := range n {
		if order[root] != 0 {
			continue
		}
		visit(root)
		for len(calls) > 0 {
			top := len(calls) - 1
			v := calls[top].v
			if next := calls[top].next; next < len(edges[v]) {
				calls[top].next++
				switch w := edges[v][next]; {
				case order[w] == 0:
					visit(w)
				case onStack[w]:
					low[v] = min(low[v], order[w])
				}
				continue
			}
			if low[v] == order[v] {
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp[w] = count
					if w == v {
						break
					}
				}
				count++
			}
			calls = calls[:top]
			if top > 0 {
				u := calls[top-1].v
				low[u] = min(low[u], low[v])
			}
		}
	}
	return comp
}
