package cycles

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/deletion/teardown"
)

var (
	vms  = schema.GroupResource{Group: "compute.io", Resource: "virtualmachines"}
	vpcs = schema.GroupResource{Group: "network.io", Resource: "vpcs"}
)

func vm(namespace, name string) Node {
	return Node{Provider: "provider", Resource: vms, Kind: "VirtualMachine", Meta: kcp.Meta{Cluster: "consumer", Namespace: namespace, Name: name}}
}

func vpc(namespace, name string) Node {
	return Node{Provider: "provider", Resource: vpcs, Kind: "VPC", Meta: kcp.Meta{Cluster: "consumer", Namespace: namespace, Name: name}}
}

// fakeIndex holds the objects that reference each object, and whether it
// holds every dependent that may reference them.
type fakeIndex struct {
	referrers map[key][]Node
	// unproved, if set, is why the index does not hold the referrers of
	// an object.
	unproved string
	// open makes every object one that objects outside its namespace may
	// come to reference.
	open bool
	// made counts the indexes the Breaker asked for.
	made int
}

func (f *fakeIndex) Referrers(n Node) []Node { return f.referrers[n.key()] }

func (f *fakeIndex) HoldsReferrers(context.Context, *teardown.Scope, Node) (bool, bool, string) {
	if f.unproved != "" {
		return false, false, f.unproved
	}
	return true, !f.open, ""
}

// references records that from references to.
func (f *fakeIndex) references(from, to Node) {
	if f.referrers == nil {
		f.referrers = map[key][]Node{}
	}
	f.referrers[to.key()] = append(f.referrers[to.key()], from)
}

// rules are the rules that protect every type, as fingerprinted.
type rules struct{ entries []registry.Entry }

func (r *rules) Find(registry.Target) []registry.Entry { return r.entries }

func breaker(ix *fakeIndex, r *rules) *Breaker {
	return New(r, func() Index { ix.made++; return ix }, 10)
}

// being returns a scope in which the namespaces named are being deleted.
func being(namespaces ...string) *teardown.Scope {
	return teardown.NewScope(func(_ context.Context, namespace string) (bool, error) {
		return slices.Contains(namespaces, namespace), nil
	})
}

func TestDecide(t *testing.T) {
	ctx := context.Background()
	vm1, vpcA, vpcB := vm("ns", "vm-1"), vpc("ns", "vpc-a"), vpc("other", "vpc-b")
	cycle := func() *fakeIndex {
		ix := &fakeIndex{}
		ix.references(vpcA, vm1)
		ix.references(vm1, vpcA)
		return ix
	}
	tests := []struct {
		name       string
		index      func() *fakeIndex
		scope      *teardown.Scope
		blockers   []Node
		wantCycle  string
		wantNote   []string
		wantWaits  bool
		wantGraph  int
		wantBroken bool
	}{
		{
			name: "a two-object cycle that the deletion of its namespace deletes is broken", index: cycle, scope: being("ns"),
			blockers: []Node{vpcA}, wantCycle: "VirtualMachine/ns/vm-1, VPC/ns/vpc-a", wantGraph: 2, wantBroken: true,
		},
		{
			name: "a cycle in a namespace that is not being deleted waits, naming what is outside", index: cycle, scope: being(),
			blockers:  []Node{vpcA},
			wantNote:  []string{"only the deletion of the namespaces or the workspace of its objects breaks", `VPC/ns/vpc-a (namespace "ns" is not being deleted)`},
			wantWaits: true,
		},
		{
			name: "an object outside the teardown that references the cycle holds it up",
			index: func() *fakeIndex {
				ix := cycle()
				ix.references(vpcB, vm1)
				return ix
			},
			scope: being("ns"), blockers: []Node{vpcA, vpcB},
		},
		{
			name: "an object that references the cycle from a namespace not being deleted is named",
			index: func() *fakeIndex {
				ix := cycle()
				ix.references(vpcB, vpcA)
				return ix
			},
			scope: being("ns"), blockers: []Node{vpcA},
			wantNote:  []string{`which the deletion of namespace "ns" can break only if`, `VPC/other/vpc-b, which references VPC/ns/vpc-a (namespace "other" is not being deleted)`},
			wantWaits: true,
		},
		{
			name: "a cycle the index may not hold every referrer of waits",
			index: func() *fakeIndex {
				ix := cycle()
				ix.unproved = "the index of VPC is not synced"
				return ix
			},
			scope: being("ns"), blockers: []Node{vpcA},
			wantNote: []string{`which the deletion of namespace "ns" deletes once the index of VPC is not synced`},
		},
		{
			name: "an object on no cycle waits", index: func() *fakeIndex { return &fakeIndex{} }, scope: being("ns"),
			blockers: []Node{vpcA},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := breaker(tt.index(), &rules{})
			d := b.Decide(ctx, tt.scope, vm1, tt.blockers)
			if d.Cycle != tt.wantCycle || d.Remembered || d.WaitsOutside != tt.wantWaits || d.Graph != tt.wantGraph {
				t.Errorf("Decide() = cycle %q, remembered %v, waits outside %v, graph %d; want %q, false, %v, %d",
					d.Cycle, d.Remembered, d.WaitsOutside, d.Graph, tt.wantCycle, tt.wantWaits, tt.wantGraph)
			}
			for _, part := range tt.wantNote {
				if !strings.Contains(d.Note, part) {
					t.Errorf("note %q does not say %q", d.Note, part)
				}
			}
			if len(tt.wantNote) == 0 && d.Note != "" {
				t.Errorf("note %q, want none", d.Note)
			}
			b.Remember(d)
			if got := b.broken.Len() > 0; got != tt.wantBroken {
				t.Errorf("cycle remembered: %v, want %v", got, tt.wantBroken)
			}
		})
	}
}

// A cycle remembered as broken lets each of its objects go as long as it
// holds: the rules are the same, and nothing outside the teardown has come
// to reference an object of it.
func TestDecideRemembersABrokenCycleWhileItHolds(t *testing.T) {
	ctx := context.Background()
	vm1, vpcA, vpcB := vm("ns", "vm-1"), vpc("ns", "vpc-a"), vpc("other", "vpc-b")
	ix := &fakeIndex{open: true}
	ix.references(vpcA, vm1)
	ix.references(vm1, vpcA)
	r := &rules{entries: []registry.Entry{{Rule: kcp.ObjectKey{Cluster: "provider", Name: "vm-vpc"}}}}
	b := breaker(ix, r)
	d := b.Decide(ctx, being("ns"), vm1, []Node{vpcA})
	if d.Cycle == "" || d.Remembered {
		t.Fatalf("Decide() = %+v, want a cycle broken now", d)
	}
	b.Remember(d)

	// The other object goes once vm-1 no longer references it.
	if d := b.Decide(ctx, being("ns"), vpcA, nil); !d.Remembered || d.Cycle != "VirtualMachine/ns/vm-1, VPC/ns/vpc-a" {
		t.Errorf("Decide() of the other object = %+v, want the cycle remembered", d)
	}
	// A blocker outside the cycle is not waived.
	if d := b.Decide(ctx, being("ns"), vpcA, []Node{vpcB}); d.Remembered {
		t.Errorf("Decide() with a blocker outside the cycle = %+v, want it not remembered", d)
	}
	// Something outside the teardown has come to reference the cycle
	// (vm-1's type may be referenced across namespaces): it is forgotten.
	ix.references(vpcB, vm1)
	if d := b.Decide(ctx, being("ns"), vpcA, []Node{vm1}); d.Remembered || d.Cycle != "" {
		t.Errorf("Decide() once an outsider references the cycle = %+v, want it forgotten and waiting", d)
	}
	if n := b.broken.Len(); n != 0 {
		t.Errorf("%d objects remembered, want the cycle forgotten", n)
	}

	// Rules that change make a remembered cycle be proved again.
	ix.referrers[vm1.key()] = []Node{vpcA}
	d = b.Decide(ctx, being("ns"), vm1, []Node{vpcA})
	b.Remember(d)
	r.entries = append(r.entries, registry.Entry{Rule: kcp.ObjectKey{Cluster: "provider", Name: "another"}})
	made := ix.made
	if d := b.Decide(ctx, being("ns"), vpcA, []Node{vm1}); d.Remembered || d.Cycle == "" {
		t.Errorf("Decide() after the rules changed = %+v, want the cycle proved again", d)
	}
	if ix.made != made+1 {
		t.Errorf("the index was asked %d times to prove the cycle again, want once (rules are compared first)", ix.made-made)
	}
}

// A denial names at most 20 objects of a cycle, and counts the rest.
func TestNameCycle(t *testing.T) {
	var members []Node
	for i := range 25 {
		members = append(members, vm("ns", fmt.Sprintf("vm-%02d", i)))
	}
	got := nameCycle(members)
	if !strings.HasPrefix(got, "VirtualMachine/ns/vm-00, VirtualMachine/ns/vm-01") || !strings.HasSuffix(got, "VirtualMachine/ns/vm-19 and 5 more") {
		t.Errorf("nameCycle() = %q", got)
	}
	if got := nameCycle(members[:2]); got != "VirtualMachine/ns/vm-00, VirtualMachine/ns/vm-01" {
		t.Errorf("nameCycle() of two = %q", got)
	}
	// A node without a kind is named by its resource.
	n := vm("", "vm-1")
	n.Kind = ""
	if got := n.String(); got != "virtualmachines.compute.io/vm-1" {
		t.Errorf("String() = %q", got)
	}
}
