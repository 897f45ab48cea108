// Package deletionorder orders the deletion of a set of objects so that no
// DELETE meets a dependent that still references its object: from the
// reference labels the objects carry (see package reflabels), an object
// that references another goes in an earlier wave, and objects that
// reference each other form a cycle, which the dependency webhook refuses
// to delete until it is broken. `kubectl dependencies order` prints it.
package deletionorder

// Node is an object of the set.
type Node struct {
	// Key is the reference label key that its dependents carry.
	Key string
	// Refs are the reference label keys it carries: the objects it
	// references. Keys of objects outside the set are ignored.
	Refs []string
	// Deleting tells that it is being deleted: it blocks nothing any more.
	Deleting bool
}

// Plan is the deletion order of a set of nodes.
type Plan struct {
	// Waves are the indices of the nodes of each wave, ascending: a wave
	// can be deleted together once the waves before it are gone or being
	// deleted.
	Waves [][]int
	// Cycles are the indices of the nodes of each cycle, ascending, in the
	// order of their first node.
	Cycles [][]int
	// Wave is the wave of each node (from 1), Cycle the number of its
	// cycle (from 1; 0 if it is on none).
	Wave, Cycle []int
}

// Order plans the deletion of nodes. A node that carries the key of
// another references it and goes in an earlier wave; several nodes may
// have the same key (the label does not name the namespace), and a node
// goes before each of them, which orders more than needed, never less.
// Nodes that reference each other (a strongly connected component) form a
// cycle and share a wave. A reference to itself is no edge.
func Order(nodes []Node) Plan {
	byKey := map[string][]int{}
	for i, n := range nodes {
		byKey[n.Key] = append(byKey[n.Key], i)
	}
	// out[i]: the nodes that i references, which go after it.
	out := make([][]int, len(nodes))
	for i, n := range nodes {
		if n.Deleting {
			continue
		}
		for _, k := range n.Refs {
			for _, j := range byKey[k] {
				if j != i {
					out[i] = append(out[i], j)
				}
			}
		}
	}
	comp, comps := components(out)
	waveOf := layers(out, comp, comps)

	p := Plan{Wave: make([]int, len(nodes)), Cycle: make([]int, len(nodes))}
	members := make([][]int, comps)
	for i := range nodes {
		members[comp[i]] = append(members[comp[i]], i)
	}
	cycleOf := make([]int, comps)
	for i := range nodes {
		c := comp[i]
		if len(members[c]) > 1 && cycleOf[c] == 0 {
			p.Cycles = append(p.Cycles, members[c])
			cycleOf[c] = len(p.Cycles)
		}
		w := waveOf[c]
		p.Wave[i], p.Cycle[i] = w, cycleOf[c]
		for len(p.Waves) < w {
			p.Waves = append(p.Waves, nil)
		}
		p.Waves[w-1] = append(p.Waves[w-1], i)
	}
	return p
}

// layers returns the wave of each component of the graph out (whose
// vertices are in the components comp): those that nothing references
// first, then level by level (Kahn's algorithm on the condensation).
func layers(out [][]int, comp []int, comps int) []int {
	indeg := make([]int, comps)
	next := make([]map[int]bool, comps)
	for i, targets := range out {
		for _, j := range targets {
			a, b := comp[i], comp[j]
			if a == b {
				continue
			}
			if next[a] == nil {
				next[a] = map[int]bool{}
			}
			if !next[a][b] {
				next[a][b] = true
				indeg[b]++
			}
		}
	}
	wave := make([]int, comps)
	var level []int
	for c := range comps {
		if indeg[c] == 0 {
			level = append(level, c)
		}
	}
	for w := 1; len(level) > 0; w++ {
		var following []int
		for _, c := range level {
			wave[c] = w
			for d := range next[c] {
				if indeg[d]--; indeg[d] == 0 {
					following = append(following, d)
				}
			}
		}
		level = following
	}
	return wave
}

// components returns the strongly connected component of each vertex of
// the graph out (Tarjan's algorithm, iterative so that long chains of
// references do not deepen the stack) and their number.
func components(out [][]int) ([]int, int) {
	n := len(out)
	index, low, comp := make([]int, n), make([]int, n), make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var (
		stack   []int
		counter int
		comps   int
	)
	visit := func(v int) {
		index[v], low[v] = counter, counter
		counter++
		stack = append(stack, v)
		onStack[v] = true
	}
	type frame struct{ v, next int }
	for root := range n {
		if index[root] >= 0 {
			continue
		}
		visit(root)
		call := []frame{{v: root}}
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.next < len(out[f.v]) {
				w := out[f.v][f.next]
				f.next++
				switch {
				case index[w] < 0:
					visit(w)
					call = append(call, frame{v: w})
				case onStack[w]:
					low[f.v] = min(low[f.v], index[w])
				}
				continue
			}
			v := f.v
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = comps
				if w == v {
					break
				}
			}
			comps++
		}
	}
	return comp, comps
}
