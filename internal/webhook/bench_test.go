package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/buger/jsonparser"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
)

// listJSON renders a list of n VirtualMachines in namespace default, shaped
// like kcp's responses (~700 bytes per object); the one at index hit (if
// any) references vpc-a, the others other VPCs.
func listJSON(n, hit int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"apiVersion":"compute.io/v1","kind":"VirtualMachineList","metadata":{"resourceVersion":"4242"},"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		vpc := fmt.Sprintf("vpc-%d", i%50)
		if i == hit {
			vpc = "vpc-a"
		}
		fmt.Fprintf(&b, `{"apiVersion":"compute.io/v1","kind":"VirtualMachine","metadata":{"annotations":{"kcp.io/cluster":"consumer","note":"created by the benchmark"},`+
			`"creationTimestamp":"2026-11-22T10:00:00Z","generation":1,"labels":{"app":"web","tier":"frontend"},"name":"vm-%05d","namespace":"default",`+
			`"resourceVersion":"%d","uid":"5f1c1a2e-0000-4000-8000-%012d"},"spec":{"cpu":4,"memory":"8Gi","image":"registry.example/os:1.2.3",`+
			`"nics":[{"name":"eth0","vpc":"%s","ip":"10.0.0.%d"},{"name":"eth1","vpc":"mgmt","ip":"10.1.0.%d"}],"vpcRef":{"name":"%s"}},`+
			`"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-11-22T10:00:00Z"}]}}`,
			i, 1000+i, i, vpc, i%250, i%250, vpc)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// benchDependents serves a fixed list for live reads and a fixed result for
// index lookups.
type benchDependents struct {
	list []byte
	hits []index.Dependent
}

func (b *benchDependents) State(index.Source) index.State {
	return index.State{Phase: index.PhaseSynced, Namespaced: true}
}

func (b *benchDependents) Hits(index.Source, []fieldpath.Path, logicalcluster.Name, string, string) []index.Dependent {
	return b.hits
}

func (b *benchDependents) Confirm(_ context.Context, _ index.Source, _ logicalcluster.Name, _ string, visit func([]byte) error) error {
	var err error
	_, perr := jsonparser.ArrayEach(b.list, func(item []byte, _ jsonparser.ValueType, _ int, _ error) {
		if err == nil {
			err = visit(item)
		}
	}, "items")
	return errors.Join(perr, err)
}

// BenchmarkValidator measures a decision with n dependents in the namespace:
// denied from the index (one dependent in the index references the object),
// and allowed after reading the n dependents live (none references it).
func BenchmarkValidator(b *testing.B) {
	rules := staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name", ".spec.nics[*].vpc")}}
	req := deleteRequest(vpcs, "consumer", "default", "vpc-a", nil)
	ctx := WithProvider(context.Background(), provider)
	for _, n := range []int{10, 1000, 10000} {
		denied := NewDeletionValidator(rules, loaded(true), &benchDependents{hits: []index.Dependent{{Cluster: "consumer", Namespace: "default", Name: "vm-00001", UID: "u1"}}})
		b.Run(fmt.Sprintf("denied-from-index/dependents=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if resp := denied.Handle(ctx, req); resp.Allowed {
					b.Fatal("allowed")
				}
			}
		})
		body := listJSON(n, -1)
		allowed := NewDeletionValidator(rules, loaded(true), &benchDependents{list: body})
		b.Run(fmt.Sprintf("allowed-after-live-read/dependents=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if resp := allowed.Handle(ctx, req); !resp.Allowed {
					b.Fatal("denied", resp.Result)
				}
			}
		})
	}
}
