package plugin

import (
	"slices"
	"strings"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/deletionorder"
)

// node is an object of the set that order plans the deletion of.
type node struct {
	obj Object
	deletionorder.Node
}

// newNode returns the node of an object with the given labels; key is its
// reference label key.
func newNode(obj Object, key string, labels map[string]string, deleting bool) node {
	n := node{obj: obj, Node: deletionorder.Node{Key: key, Deleting: deleting}}
	for k := range labels {
		if strings.HasPrefix(k, depv1alpha1.LabelReferencePrefix) {
			n.Refs = append(n.Refs, k)
		}
	}
	slices.Sort(n.Refs)
	return n
}

// OrderResult is the answer of `order`, as -o json|yaml prints it.
type OrderResult struct {
	// Waves are the objects in deletion order: those of one wave can be
	// deleted together once the previous waves are gone (or being
	// deleted).
	Waves []Wave `json:"waves"`
	// Cycles are the objects that reference each other: each DELETE of
	// one of them is refused until the cycle is broken.
	Cycles []Cycle `json:"cycles,omitempty"`
	// Missing are objects of the files that do not exist.
	Missing []Object `json:"missing,omitempty"`
}

// Wave is one wave of deletions.
type Wave struct {
	Wave    int          `json:"wave"`
	Objects []WaveObject `json:"objects"`
}

// WaveObject is an object of a wave.
type WaveObject struct {
	Object
	// Cycle is the number of the cycle it is on (see OrderResult.Cycles),
	// 0 if none.
	Cycle int `json:"cycle,omitempty"`
}

// Cycle is a set of objects that reference each other.
type Cycle struct {
	Cycle int `json:"cycle"`
	// Wave is the wave of its objects, in which they can be deleted once
	// it is broken.
	Wave    int      `json:"wave"`
	Objects []Object `json:"objects"`
}

// plan orders the deletion of nodes (see deletionorder.Order), each wave
// sorted by kind, namespace and name.
func plan(nodes []node) OrderResult {
	slices.SortFunc(nodes, func(a, b node) int { return compareObjects(a.obj, b.obj) })
	in := make([]deletionorder.Node, len(nodes))
	for i, n := range nodes {
		in[i] = n.Node
	}
	p := deletionorder.Order(in)
	res := OrderResult{Waves: []Wave{}}
	for w, members := range p.Waves {
		wave := Wave{Wave: w + 1}
		for _, i := range members {
			wave.Objects = append(wave.Objects, WaveObject{Object: nodes[i].obj, Cycle: p.Cycle[i]})
		}
		res.Waves = append(res.Waves, wave)
	}
	for c, members := range p.Cycles {
		cy := Cycle{Cycle: c + 1, Wave: p.Wave[members[0]]}
		for _, i := range members {
			cy.Objects = append(cy.Objects, nodes[i].obj)
		}
		res.Cycles = append(res.Cycles, cy)
	}
	return res
}
