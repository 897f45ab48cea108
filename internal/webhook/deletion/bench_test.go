package deletion

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

// benchDependents serves a fixed result for index lookups.
type benchDependents struct {
	hits []kcp.Meta
}

func (b *benchDependents) Serves(context.Context, index.Source, logicalcluster.Name) error {
	return nil
}

func (b *benchDependents) State(index.Source) index.State {
	return index.State{Phase: index.PhaseSynced, Namespaced: true}
}

func (b *benchDependents) Hits(index.Source, []fieldpath.Reference, logicalcluster.Name, string, string) []kcp.Meta {
	return b.hits
}

func (b *benchDependents) Fenced(context.Context, index.Query, time.Time) (bool, error) {
	return true, nil
}

func (b *benchDependents) Confirm(context.Context, index.Query) ([]kcp.Meta, int, error) {
	return nil, 0, errors.New("the benchmark decides from the index only")
}

// BenchmarkValidator measures a decision denied from the index (one
// dependent in the index references the object); its cost does not depend
// on how many dependents there are. The live read that confirms a miss is measured by the index's
// BenchmarkConfirm.
func BenchmarkValidator(b *testing.B) {
	rules := staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name", ".spec.nics[*].vpc")}}
	req := deleteRequest(vpcs, "consumer", "default", "vpc-a", nil)
	ctx := webhook.WithProvider(context.Background(), provider)
	denied := NewValidator(rules, loaded(true), &benchDependents{hits: []kcp.Meta{{Cluster: "consumer", Namespace: "default", Name: "vm-00001", UID: "u1"}}})
	b.ReportAllocs()
	for b.Loop() {
		if resp := denied.Handle(ctx, req); resp.Allowed {
			b.Fatal("allowed")
		}
	}
}

// ringDependents is an index of a ring of VPCs in the namespace ring, each
// referencing the next as its peer: r-i is referenced by r-(i-1).
type ringDependents struct {
	benchDependents
	n int
}

func (r *ringDependents) Hits(_ index.Source, _ []fieldpath.Reference, cluster logicalcluster.Name, _ string, name string) []kcp.Meta {
	var i int
	if _, err := fmt.Sscanf(name, "r-%d", &i); err != nil {
		return nil
	}
	prev := fmt.Sprintf("r-%d", (i+r.n-1)%r.n)
	return []kcp.Meta{{Cluster: cluster, Namespace: "ring", Name: prev, UID: types.UID("uid-" + prev)}}
}

func (r *ringDependents) NamespaceTerminating(context.Context, index.Source, logicalcluster.Name, string) (bool, error) {
	return true, nil
}

// BenchmarkTeardownRing measures the decision on an item of a namespace's
// teardown on a ring of VPCs: the proof that breaks it (the graph, its
// components, the namespace and the index checked for every object), and
// an item of the ring once it is remembered as broken.
func BenchmarkTeardownRing(b *testing.B) {
	rules := staticRules{vpcs.GroupResource(): {entry("provider/vpc-peer", vpcs, "VPC", ".spec.peer")}}
	ctx := webhook.WithProvider(context.Background(), provider)
	for _, n := range []int{66, 1000, 10_000} {
		deps := &ringDependents{n: n}
		item := teardownItem(deleteRequest(vpcs, consumer, "ring", "r-0", nil))
		b.Run(fmt.Sprintf("proof/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v := NewValidator(rules, loaded(true), deps, WithNamespaces(deps))
				if resp := v.Handle(ctx, item); !resp.Allowed {
					b.Fatal(resp.Result.Message)
				}
			}
		})
		b.Run(fmt.Sprintf("remembered/%d", n), func(b *testing.B) {
			v := NewValidator(rules, loaded(true), deps, WithNamespaces(deps))
			if resp := v.Handle(ctx, item); !resp.Allowed {
				b.Fatal(resp.Result.Message)
			}
			next := teardownItem(deleteRequest(vpcs, consumer, "ring", "r-1", nil))
			b.ReportAllocs()
			for b.Loop() {
				if resp := v.Handle(ctx, next); !resp.Allowed {
					b.Fatal(resp.Result.Message)
				}
			}
		})
	}
}
