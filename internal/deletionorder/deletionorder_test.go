package deletionorder

import (
	"fmt"
	"reflect"
	"testing"
)

// node is a node with key name that references the nodes named refs.
func node(name string, refs ...string) Node {
	return Node{Key: name, Refs: refs}
}

func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  []Node
		waves  [][]int
		cycles [][]int
	}{
		{name: "nothing", nodes: nil, waves: nil},
		{name: "independent nodes share a wave", nodes: []Node{node("a"), node("b")}, waves: [][]int{{0, 1}}},
		{
			name:  "a chain: dependents first",
			nodes: []Node{node("vpc"), node("subnet", "vpc"), node("vm", "subnet", "vpc")},
			waves: [][]int{{2}, {1}, {0}},
		},
		{
			name:  "a node waits for its deepest dependent",
			nodes: []Node{node("vpc"), node("vm-1", "vpc"), node("subnet", "vpc"), node("vm-2", "subnet")},
			waves: [][]int{{1, 3}, {2}, {0}},
		},
		{name: "keys of nodes outside the set", nodes: []Node{node("vm", "elsewhere")}, waves: [][]int{{0}}},
		{name: "a reference to itself", nodes: []Node{node("a", "a")}, waves: [][]int{{0}}},
		{name: "a node being deleted blocks nothing", nodes: []Node{node("vpc"), {Key: "vm", Refs: []string{"vpc"}, Deleting: true}}, waves: [][]int{{0, 1}}},
		{
			name:  "a node goes before every node of the key it carries",
			nodes: []Node{node("vpc"), node("vpc"), node("vm", "vpc")},
			waves: [][]int{{2}, {0, 1}},
		},
		{
			name:   "a cycle shares a wave, after its dependents and before what it references",
			nodes:  []Node{node("vpc", "gw"), node("gw", "vpc", "zone"), node("vm", "vpc"), node("zone")},
			waves:  [][]int{{2}, {0, 1}, {3}},
			cycles: [][]int{{0, 1}},
		},
		{
			name:   "two cycles, numbered by their first node",
			nodes:  []Node{node("b1", "b2"), node("a1", "a2"), node("b2", "b1"), node("a2", "a3"), node("a3", "a1")},
			waves:  [][]int{{0, 1, 2, 3, 4}},
			cycles: [][]int{{0, 2}, {1, 3, 4}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Order(tc.nodes)
			if !reflect.DeepEqual(p.Waves, tc.waves) || !reflect.DeepEqual(p.Cycles, tc.cycles) {
				t.Errorf("waves %v, cycles %v; want %v, %v", p.Waves, p.Cycles, tc.waves, tc.cycles)
			}
			for w, members := range p.Waves {
				for _, i := range members {
					if p.Wave[i] != w+1 {
						t.Errorf("Wave[%d] = %d, want %d", i, p.Wave[i], w+1)
					}
				}
			}
			for c, members := range p.Cycles {
				for _, i := range members {
					if p.Cycle[i] != c+1 {
						t.Errorf("Cycle[%d] = %d, want %d", i, p.Cycle[i], c+1)
					}
				}
			}
		})
	}
}

func TestOrderLongChain(t *testing.T) {
	// 10,000 nodes, each referencing the next: 10,000 waves, and no deep
	// recursion in the search for cycles.
	const count = 10000
	nodes := make([]Node, count)
	for i := range count {
		nodes[i] = node(fmt.Sprint(i), fmt.Sprint(i+1))
	}
	p := Order(nodes)
	if len(p.Waves) != count || p.Waves[0][0] != 0 || p.Waves[count-1][0] != count-1 || len(p.Cycles) != 0 {
		t.Errorf("%d waves, %d cycles", len(p.Waves), len(p.Cycles))
	}
	// Closed into one cycle.
	nodes[count-1].Refs = []string{"0"}
	p = Order(nodes)
	if len(p.Waves) != 1 || len(p.Cycles) != 1 || len(p.Cycles[0]) != count {
		t.Errorf("%d waves, %d cycles", len(p.Waves), len(p.Cycles))
	}
}

func BenchmarkOrder(b *testing.B) {
	// A stack of 10,000 VPCs, Subnets and VMs.
	const count = 10000
	var nodes []Node
	for i := range count {
		vpc, subnet := fmt.Sprint("vpc-", i), fmt.Sprint("subnet-", i)
		nodes = append(nodes, node(vpc), node(subnet, vpc), node(fmt.Sprint("vm-", i), subnet, vpc))
	}
	for b.Loop() {
		if p := Order(nodes); len(p.Waves) != 3 {
			b.Fatal(len(p.Waves))
		}
	}
}
