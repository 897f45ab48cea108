package deletion

import (
	"context"
	"errors"
	"testing"

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

func (b *benchDependents) Fenced(context.Context, index.Query) (bool, error) {
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
