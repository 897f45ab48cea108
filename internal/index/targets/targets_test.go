package targets

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index/store"
)

func obj(cluster, namespace, name string) *store.Object {
	return &store.Object{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Cluster: logicalcluster.Name(cluster)}
}

// The set answers Has (one object) and Named (a name in any namespace)
// from what the reflectors of its shards stored: lists replace a shard,
// events add and remove objects, a dropped shard takes its objects along.
func TestSet(t *testing.T) {
	const shard1, shard2 = "https://shard-1", "https://shard-2"
	type query struct {
		cluster, namespace, name string
		// any asks Named instead of Has.
		any  bool
		want bool
	}
	type step struct {
		shard string
		// do is "replace" (with objs), "add", "update", "delete" or "drop".
		do   string
		objs []*store.Object
		// notified: whether the step must call changed.
		notified bool
		queries  []query
		len      int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a list, then events", []step{
			{shard: shard1, do: "replace", objs: []*store.Object{obj("c1", "default", "vpc-a"), obj("c1", "team", "vpc-b")}, notified: true, len: 2, queries: []query{
				{"c1", "default", "vpc-a", false, true},
				{"c1", "team", "vpc-a", false, false},
				{"c2", "default", "vpc-a", false, false},
				{"c1", "", "vpc-b", true, true},
				{"c1", "", "vpc-c", true, false},
			}},
			{shard: shard1, do: "add", objs: []*store.Object{obj("c1", "default", "vpc-c")}, notified: true, len: 3, queries: []query{
				{"c1", "default", "vpc-c", false, true},
			}},
			{shard: shard1, do: "update", objs: []*store.Object{obj("c1", "default", "vpc-c")}, len: 3},
			{shard: shard1, do: "delete", objs: []*store.Object{obj("c1", "default", "vpc-a")}, notified: true, len: 2, queries: []query{
				{"c1", "default", "vpc-a", false, false},
				{"c1", "", "vpc-a", true, false},
			}},
			{shard: shard1, do: "delete", objs: []*store.Object{obj("c1", "default", "vpc-a")}, len: 2},
		}},
		{"a name in two namespaces stays named until both are gone", []step{
			{shard: shard1, do: "replace", objs: []*store.Object{obj("c1", "a", "vpc"), obj("c1", "b", "vpc")}, notified: true, len: 2},
			{shard: shard1, do: "delete", objs: []*store.Object{obj("c1", "a", "vpc")}, notified: true, len: 1, queries: []query{
				{"c1", "", "vpc", true, true},
				{"c1", "a", "vpc", false, false},
			}},
			{shard: shard1, do: "delete", objs: []*store.Object{obj("c1", "b", "vpc")}, notified: true, len: 0, queries: []query{
				{"c1", "", "vpc", true, false},
			}},
		}},
		{"cluster-scoped objects", []step{
			{shard: shard1, do: "replace", objs: []*store.Object{obj("c1", "", "core-router")}, notified: true, len: 1, queries: []query{
				{"c1", "", "core-router", false, true},
				{"c1", "", "core-router", true, true},
				{"c1", "default", "core-router", false, false},
			}},
		}},
		{"two shards; a relist replaces one shard only, a dropped shard takes its objects", []step{
			{shard: shard1, do: "replace", objs: []*store.Object{obj("c1", "default", "vpc-a")}, notified: true, len: 1},
			{shard: shard2, do: "replace", objs: []*store.Object{obj("c2", "default", "vpc-a")}, notified: true, len: 2, queries: []query{
				{"c1", "default", "vpc-a", false, true},
				{"c2", "default", "vpc-a", false, true},
			}},
			{shard: shard1, do: "replace", objs: []*store.Object{obj("c1", "default", "vpc-b")}, notified: true, len: 2, queries: []query{
				{"c1", "default", "vpc-a", false, false},
				{"c1", "default", "vpc-b", false, true},
				{"c2", "default", "vpc-a", false, true},
			}},
			{shard: shard2, do: "drop", notified: true, len: 1, queries: []query{
				{"c2", "default", "vpc-a", false, false},
				{"c2", "", "vpc-a", true, false},
			}},
			{shard: shard2, do: "drop", len: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var notified, added, synced atomic.Int32
			var addedIn logicalcluster.Name
			s := New(func() { notified.Add(1) }, func(cluster logicalcluster.Name) { added.Add(1); addedIn = cluster })
			for i, st := range tt.steps {
				before, addedBefore := notified.Load(), added.Load()
				rs := s.ForShard(st.shard, func() { synced.Add(1) })
				var err error
				switch st.do {
				case "replace":
					list := make([]any, 0, len(st.objs))
					for _, o := range st.objs {
						list = append(list, o)
					}
					syncedBefore := synced.Load()
					err = rs.Replace(list, "10")
					if synced.Load() != syncedBefore+1 {
						t.Errorf("step %d: a complete list did not call synced", i)
					}
				case "add":
					err = rs.Add(st.objs[0])
				case "update":
					err = rs.Update(st.objs[0])
				case "delete":
					err = rs.Delete(st.objs[0])
				case "drop":
					s.DropShard(st.shard)
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if got := notified.Load() != before; got != st.notified {
					t.Errorf("step %d (%s): notified = %v, want %v", i, st.do, got, st.notified)
				}
				// Only a change that may add an object counts as added: an
				// object that goes makes no other clearable.
				wantAdded := st.notified && st.do != "delete" && st.do != "drop"
				if got := added.Load() != addedBefore; got != wantAdded {
					t.Errorf("step %d (%s): added = %v, want %v", i, st.do, got, wantAdded)
				}
				// An object added names its workspace; a complete list
				// may add to any.
				if wantIn := logicalcluster.Name(""); wantAdded {
					if st.do != "replace" {
						wantIn = st.objs[0].Cluster
					}
					if addedIn != wantIn {
						t.Errorf("step %d (%s): added in %q, want %q", i, st.do, addedIn, wantIn)
					}
				}
				if s.Len() != st.len {
					t.Errorf("step %d (%s): Len() = %d, want %d", i, st.do, s.Len(), st.len)
				}
				for _, q := range st.queries {
					got := s.Has(logicalcluster.Name(q.cluster), q.namespace, q.name)
					if q.any {
						got = s.Named(logicalcluster.Name(q.cluster), q.name)
					}
					if got != q.want {
						t.Errorf("step %d (%s): %+v = %v", i, st.do, q, got)
					}
				}
			}
		})
	}
}

// The reflector hands the store only what it decoded; anything else is an
// error, not a panic.
func TestSetRefusesOtherObjects(t *testing.T) {
	rs := New(nil, nil).ForShard("https://shard-1", func() {})
	if err := rs.Add("not an object"); err == nil {
		t.Error("Add accepted a string")
	}
	if err := rs.Replace([]any{42}, "1"); err == nil {
		t.Error("Replace accepted an int")
	}
}

// targetsOf returns n objects as a shard's list decodes them: 100
// workspaces of n/100 VPCs in 10 namespaces each, with realistic names.
func targetsOf(n int) []any {
	list := make([]any, 0, n)
	for i := range n {
		cluster := fmt.Sprintf("2x7c%012d", i%100)
		list = append(list, obj(cluster, fmt.Sprintf("team-%d", i%10), fmt.Sprintf("vpc-%06d", i)))
	}
	return list
}

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkSetMemory measures what a set holds per watched target: the heap
// that 10,000 objects of one shard's list take once stored, names and
// interned scopes included (bytes/target, MiB/10k), and, while a relist
// is being stored, the decoded list on top of that (peak-MiB/10k): the
// reflector drops the list after Replace.
//
//	go test ./internal/index/targets -run '^$' -bench SetMemory -benchtime 3x
func BenchmarkSetMemory(b *testing.B) {
	const n = 10_000
	for range b.N {
		before := heapInUse()
		s := New(nil, nil)
		peak := func() uint64 {
			list := targetsOf(n)
			defer runtime.KeepAlive(list)
			if err := s.ForShard("https://shard-1", func() {}).Replace(list, "1"); err != nil {
				b.Fatal(err)
			}
			return heapInUse()
		}()
		after := heapInUse()
		b.ReportMetric(float64(after-before)/n, "bytes/target")
		b.ReportMetric(float64(after-before)/(1<<20), "MiB/10k")
		b.ReportMetric(float64(peak-before)/(1<<20), "peak-MiB/10k")
		runtime.KeepAlive(s)
	}
}

// BenchmarkSetHas is the cost of one lookup in a set of 10,000 targets.
func BenchmarkSetHas(b *testing.B) {
	list := targetsOf(10_000)
	s := New(nil, nil)
	if err := s.ForShard("https://shard-1", func() {}).Replace(list, "1"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		o := list[i%len(list)].(*store.Object)
		if !s.Has(o.Cluster, o.Namespace, o.Name) {
			b.Fatal("missing")
		}
	}
}
