package audit

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// BenchmarkPass is the CPU of one pass over 10,000 VMs in 100 workspaces,
// each referencing a VPC, against 10,000 watched VPCs: all of them
// resolved, or all dangling (every pass after the first, whose findings it
// keeps).
//
//	go test ./internal/audit -run '^$' -bench Pass -benchmem
func BenchmarkPass(b *testing.B) {
	for _, dangling := range []bool{false, true} {
		b.Run(fmt.Sprintf("dangling=%v", dangling), func(b *testing.B) {
			ix := newFakeIndex()
			vmStore := ix.stores[vms].ForShard("https://shard-1", func() {})
			var list []any
			for i := range 10_000 {
				cluster := fmt.Sprintf("2x7c%012d", i%100)
				raw := fmt.Sprintf(`{"metadata":{"name":"vm-%d","namespace":"team-%d","uid":"6f1c7a52-0000-4000-8000-%012d","annotations":{"kcp.io/cluster":%q}},"spec":{"vpcRef":{"name":"vpc-%d"}}}`,
					i, i%10, i, cluster, i)
				o, err := store.Decode([]byte(raw), ix.paths[vms])
				if err != nil {
					b.Fatal(err)
				}
				if err := vmStore.Add(o); err != nil {
					b.Fatal(err)
				}
				if !dangling {
					list = append(list, &store.Object{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%d", i%10), Name: fmt.Sprintf("vpc-%d", i)}, Cluster: logicalcluster.Name(cluster)})
				} else {
					list = append(list, &store.Object{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: fmt.Sprintf("vpc-%d", i)}, Cluster: logicalcluster.Name(cluster)})
				}
			}
			if err := ix.sets[vpcs].ForShard("https://shard-1", func() {}).Replace(list, "1"); err != nil {
				b.Fatal(err)
			}
			w := &fakeWriter{conditions: map[kcp.ObjectKey]metav1.Condition{}}
			a := New(newFakeRules(), ix, nil, w.write, Options{GracePeriod: time.Minute})
			ix.WatchTargets(true)
			a.pass(context.Background())
			b.ResetTimer()
			for range b.N {
				a.pass(context.Background())
			}
			b.StopTimer()
			if got := len(a.findings); (got == 10_000) != dangling {
				b.Fatalf("%d findings", got)
			}
		})
	}
}
