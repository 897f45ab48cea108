package teardown

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// referrersOf returns a referrers function over edges "a<-b" (b references
// a), given as a map.
func referrersOf(edges map[string][]string) func(string) []string {
	return func(k string) []string { return edges[k] }
}

// ring returns the referrers of a ring of n objects r0 … r(n-1), each
// referencing the next: r(i+1) is referenced by r(i).
func ring(n int) map[string][]string {
	edges := map[string][]string{}
	for i := range n {
		next := fmt.Sprintf("r%d", (i+1)%n)
		edges[next] = append(edges[next], fmt.Sprintf("r%d", i))
	}
	return edges
}

func sorted(ks []string) string {
	ks = slices.Clone(ks)
	slices.Sort(ks)
	return strings.Join(ks, ",")
}

func TestComponent(t *testing.T) {
	tests := []struct {
		name string
		// edges: the referrers of each object.
		edges map[string][]string
		start string
		// want is the component of each object named, sorted and joined.
		want map[string]string
		// wantNodes is how many objects the graph holds.
		wantNodes int
	}{
		{
			name:  "an object nothing references is alone",
			edges: map[string][]string{},
			start: "a", want: map[string]string{"a": "a"}, wantNodes: 1,
		},
		{
			name:  "a chain is no cycle: each object is alone",
			edges: map[string][]string{"a": {"b"}, "b": {"c"}},
			start: "a", want: map[string]string{"a": "a", "b": "b", "c": "c"}, wantNodes: 3,
		},
		{
			name:  "two objects that reference each other",
			edges: map[string][]string{"a": {"b"}, "b": {"a"}},
			start: "a", want: map[string]string{"a": "a,b", "b": "a,b"}, wantNodes: 2,
		},
		{
			name:  "an object that references itself",
			edges: map[string][]string{"a": {"a"}},
			start: "a", want: map[string]string{"a": "a"}, wantNodes: 1,
		},
		{
			name:  "a cycle and an object that references it from outside",
			edges: map[string][]string{"a": {"b"}, "b": {"a", "x"}},
			start: "a", want: map[string]string{"a": "a,b", "b": "a,b", "x": "x"}, wantNodes: 3,
		},
		{
			name: "a cycle referenced by another cycle: two components",
			// a ↔ b; c ↔ d; c references b.
			edges: map[string][]string{"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}},
			start: "a", want: map[string]string{"a": "a,b", "c": "c,d"}, wantNodes: 4,
		},
		{
			name: "two cycles through one object: one component",
			// a → b → a and a → c → a.
			edges: map[string][]string{"a": {"b", "c"}, "b": {"a"}, "c": {"a"}},
			start: "a", want: map[string]string{"a": "a,b,c", "b": "a,b,c"}, wantNodes: 3,
		},
		{
			name: "a cycle that self reaches only downstream is not in its component",
			// a is referenced by b, b by c, c by b: b ↔ c, a alone.
			edges: map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"b"}},
			start: "a", want: map[string]string{"a": "a", "b": "b,c"}, wantNodes: 3,
		},
		{
			name:  "a ring of 66",
			edges: ring(66),
			start: "r0", want: map[string]string{"r0": sorted(slices.Collect(func(yield func(string) bool) {
				for i := range 66 {
					if !yield(fmt.Sprintf("r%d", i)) {
						return
					}
				}
			}))}, wantNodes: 66,
		},
		{
			name:  "an object not in the graph has no component",
			edges: map[string][]string{"a": {"b"}},
			start: "a", want: map[string]string{"z": ""}, wantNodes: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := Explore(tt.start, referrersOf(tt.edges), 1000)
			if err != nil {
				t.Fatal(err)
			}
			if g.Len() != tt.wantNodes {
				t.Errorf("%d objects, want %d", g.Len(), tt.wantNodes)
			}
			if g.Nodes()[0] != tt.start {
				t.Errorf("first object %q, want the start %q", g.Nodes()[0], tt.start)
			}
			for k, want := range tt.want {
				if got := sorted(g.Component(k)); got != want {
					t.Errorf("component of %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

// A ring far longer than any recursion would survive, and its component
// in time proportional to it.
func TestComponentOfALongRing(t *testing.T) {
	const n = 200_000
	g, err := Explore("r0", referrersOf(ring(n)), n)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(g.Component("r0")); got != n {
		t.Errorf("component of %d objects, want %d", got, n)
	}
}

func TestExploreStopsAtItsLimit(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		limit   int
		wantErr bool
	}{
		{name: "as many objects as the limit", n: 64, limit: 64},
		{name: "one more than the limit", n: 65, limit: 64, wantErr: true},
		{name: "far more than the limit", n: 10_000, limit: 64, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := 0
			edges := ring(tt.n)
			g, err := Explore("r0", func(k string) []string { asked++; return edges[k] }, tt.limit)
			if tt.wantErr {
				if !errors.Is(err, ErrTooLarge) || g != nil {
					t.Fatalf("graph %v, error %v; want ErrTooLarge", g, err)
				}
				if asked > tt.limit {
					t.Errorf("asked for the referrers of %d objects past a limit of %d", asked, tt.limit)
				}
				return
			}
			if err != nil || g.Len() != tt.n {
				t.Fatalf("graph of %v objects, error %v; want %d", g, err, tt.n)
			}
		})
	}
}

func TestReferencing(t *testing.T) {
	// a is referenced by b and x; b by a.
	g, err := Explore("a", referrersOf(map[string][]string{"a": {"b", "x"}, "b": {"a"}}), 10)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"a": "b", "b": "a", "x": "a", "z": ""} {
		if got := sorted(g.Referencing(k)); got != want {
			t.Errorf("%s references %q, want %q", k, got, want)
		}
	}
	if !g.Contains("x") || g.Contains("z") {
		t.Error("Contains is wrong")
	}
}

// On random graphs, two objects share a component exactly when each
// reaches the other.
func TestComponentsMatchReachability(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 1 + rng.IntN(12)
		edges := map[string][]string{}
		name := func(i int) string { return fmt.Sprintf("n%d", i) }
		for i := range n {
			for j := range n {
				if rng.IntN(4) == 0 {
					edges[name(i)] = append(edges[name(i)], name(j))
				}
			}
		}
		g, err := Explore("n0", referrersOf(edges), n)
		if err != nil {
			t.Fatal(err)
		}
		reaches := func(from, to string) bool {
			seen := map[string]bool{from: true}
			queue := []string{from}
			for len(queue) > 0 {
				k := queue[0]
				queue = queue[1:]
				if k == to {
					return true
				}
				for _, r := range edges[k] {
					if !seen[r] {
						seen[r] = true
						queue = append(queue, r)
					}
				}
			}
			return false
		}
		for _, a := range g.Nodes() {
			if !reaches("n0", a) {
				t.Fatalf("round %d: %s is in the graph but not reached from n0", round, a)
			}
			comp := g.Component(a)
			for _, b := range g.Nodes() {
				want := reaches(a, b) && reaches(b, a)
				if got := slices.Contains(comp, b); got != want {
					t.Fatalf("round %d: %s in the component of %s = %v, want %v (edges %v)", round, b, a, got, want, edges)
				}
			}
		}
	}
}
