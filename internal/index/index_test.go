package index

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unique"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

var testSource = Source{Export: kcp.ObjectKey{Cluster: "provider", Name: "compute.io"}, Resource: vms}

var (
	vpcRef = fieldpath.MustParse(".spec.vpcRef.name")
	nics   = fieldpath.MustParse(".spec.nics[*].vpc")
	backup = fieldpath.MustParse(".spec.backupVPC")
)

// newTestIndex returns an index with testSource registered (not watched),
// and the reflector stores of two shards.
func newTestIndex(paths ...fieldpath.Path) (*Index, *shardStore, *shardStore) {
	ix := &Index{sources: map[Source]*sourceWatch{}}
	sw := &sourceWatch{src: testSource, paths: paths, store: newStore(), state: State{Phase: PhaseSynced}}
	ix.sources[testSource] = sw
	return ix, &shardStore{store: sw.store, shard: "shard-1", synced: func() {}}, &shardStore{store: sw.store, shard: "shard-2", synced: func() {}}
}

// dependent returns what a reflector would hand the store: cluster,
// namespace/name (namespace optional), and the raw JSON spec.
func dependent(t *testing.T, paths []fieldpath.Path, cluster, nsName, spec string, terminating bool) *object {
	t.Helper()
	ns, name, ok := strings.Cut(nsName, "/")
	if !ok {
		ns, name = "", nsName
	}
	meta := fmt.Sprintf(`"name":%q,"uid":"uid-%s","annotations":{"kcp.io/cluster":%q}`, name, name, cluster)
	if ns != "" {
		meta += fmt.Sprintf(`,"namespace":%q`, ns)
	}
	if terminating {
		meta += `,"deletionTimestamp":"2026-01-01T00:00:00Z"`
	}
	o, err := decodeObject([]byte(`{"metadata":{`+meta+`},"spec":`+spec+`}`), paths)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// names renders hits as cluster/namespace/name (terminating marked), sorted.
func names(deps []Dependent) []string {
	out := make([]string, 0, len(deps))
	for _, d := range deps {
		s := d.Cluster.String() + "/" + d.Namespace + "/" + d.Name
		if d.Terminating {
			s += " (terminating)"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func TestIndexHits(t *testing.T) {
	paths := []fieldpath.Path{vpcRef, nics, backup}
	ix, shard1, shard2 := newTestIndex(paths...)
	add := func(s *shardStore, cluster, nsName, spec string, terminating bool) {
		t.Helper()
		if err := s.Add(dependent(t, paths, cluster, nsName, spec, terminating)); err != nil {
			t.Fatal(err)
		}
	}
	add(shard1, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-a"}}`, false)
	add(shard1, "c1", "default/vm-2", `{"nics":[{"vpc":"vpc-x"},{"vpc":"vpc-a"}]}`, false)
	add(shard1, "c1", "other/vm-3", `{"vpcRef":{"name":"vpc-a"}}`, false)
	add(shard1, "c1", "gateway", `{"backupVPC":"vpc-a"}`, false) // cluster-scoped
	add(shard1, "c1", "default/vm-dying", `{"vpcRef":{"name":"vpc-a"}}`, true)
	add(shard1, "c1", "default/vm-both", `{"vpcRef":{"name":"vpc-a"},"nics":[{"vpc":"vpc-a"}]}`, false)
	add(shard2, "c2", "default/vm-1", `{"vpcRef":{"name":"vpc-a"}}`, false)

	tests := []struct {
		name      string
		paths     []fieldpath.Path
		cluster   logicalcluster.Name
		namespace string
		want      []string
	}{
		{
			name:  "namespace scope: the namespace and cluster-scoped dependents; terminating ones are returned marked",
			paths: paths, cluster: "c1", namespace: "default",
			want: []string{"c1//gateway", "c1/default/vm-1", "c1/default/vm-2", "c1/default/vm-both", "c1/default/vm-dying (terminating)"},
		},
		{
			name: "cluster scope: every namespace", paths: paths, cluster: "c1",
			want: []string{"c1//gateway", "c1/default/vm-1", "c1/default/vm-2", "c1/default/vm-both", "c1/default/vm-dying (terminating)", "c1/other/vm-3"},
		},
		{name: "only the paths asked for", paths: []fieldpath.Path{nics}, cluster: "c1", namespace: "default", want: []string{"c1/default/vm-2", "c1/default/vm-both"}},
		{name: "other clusters are apart", paths: paths, cluster: "c2", namespace: "default", want: []string{"c2/default/vm-1"}},
		{name: "a path the source does not read", paths: []fieldpath.Path{fieldpath.MustParse(".spec.other")}, cluster: "c1", want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := names(ix.Hits(testSource, tt.paths, tt.cluster, tt.namespace, "vpc-a"))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Hits() = %v, want %v", got, tt.want)
			}
		})
	}

	// Update: vm-1 now references another VPC.
	add(shard1, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-b"}}`, false)
	if got := names(ix.Hits(testSource, paths, "c1", "default", "vpc-b")); !slices.Equal(got, []string{"c1/default/vm-1"}) {
		t.Errorf("after update, references to vpc-b: %v", got)
	}
	if got := names(ix.Hits(testSource, []fieldpath.Path{vpcRef}, "c1", "default", "vpc-a")); slices.Contains(got, "c1/default/vm-1") {
		t.Errorf("after update, vm-1 still references vpc-a: %v", got)
	}

	// Delete.
	if err := shard1.Delete(dependent(t, paths, "c1", "default/vm-2", `{}`, false)); err != nil {
		t.Fatal(err)
	}
	if got := names(ix.Hits(testSource, []fieldpath.Path{nics}, "c1", "default", "vpc-a")); !slices.Equal(got, []string{"c1/default/vm-both"}) {
		t.Errorf("after delete: %v", got)
	}

	// Replace of one shard leaves the other shard alone.
	if err := shard1.Replace([]any{dependent(t, paths, "c1", "default/vm-new", `{"vpcRef":{"name":"vpc-a"}}`, false)}, "100"); err != nil {
		t.Fatal(err)
	}
	if got := names(ix.Hits(testSource, paths, "c1", "", "vpc-a")); !slices.Equal(got, []string{"c1/default/vm-new"}) {
		t.Errorf("after Replace on shard-1: %v", got)
	}
	if got := names(ix.Hits(testSource, paths, "c2", "", "vpc-a")); len(got) != 1 {
		t.Errorf("Replace on shard-1 touched shard-2: %v", got)
	}
	if shard, _ := ix.sources[testSource].store.shard("c2"); shard != "shard-2" {
		t.Errorf("shard of c2 = %q", shard)
	}
	if ix.Len() != 2 {
		t.Errorf("Len() = %d, want 2", ix.Len())
	}
	if got := ix.Hits(Source{Export: testSource.Export, Resource: vms.GroupResource().WithVersion("v2")}, paths, "c1", "", "vpc-a"); got != nil {
		t.Errorf("a source that is not watched has hits: %v", got)
	}
}

// The store keeps nothing of a dependent but what decisions need.
func TestStoreKeepsOnlyWhatDecisionsNeed(t *testing.T) {
	paths := []fieldpath.Path{vpcRef}
	_, shard, _ := newTestIndex(paths...)
	o := dependent(t, paths, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-a"},"userData":"`+strings.Repeat("x", 4096)+`"}`, false)
	if err := shard.Add(o); err != nil {
		t.Fatal(err)
	}
	e := shard.store.objects["shard-1"][objKey{scope: unique.Make(scope{cluster: "c1", namespace: "default"}), name: "vm-1"}]
	if e == nil {
		t.Fatal("vm-1 is not stored")
	}
	want := entry{scope: unique.Make(scope{cluster: "c1", namespace: "default"}), name: "vm-1", uid: uid{other: unique.Make("uid-vm-1")},
		refs: []ref{{path: 0, value: "vpc-a"}}}
	if !reflect.DeepEqual(*e, want) {
		t.Errorf("stored %+v, want %+v", *e, want)
	}
	if got, want := e.dependent(), (Dependent{Cluster: "c1", Namespace: "default", Name: "vm-1", UID: "uid-vm-1"}); got != want {
		t.Errorf("dependent() = %+v, want %+v", got, want)
	}
}

func TestUIDs(t *testing.T) {
	for _, s := range []types.UID{"5f1c1a2e-0000-4000-8000-000000000001", "5F1C1A2E-0000-4000-8000-000000000001", "not-a-uuid", ""} {
		if got := newUID(s).String(); got != s {
			t.Errorf("newUID(%q).String() = %q", s, got)
		}
	}
	if u := newUID("5f1c1a2e-0000-4000-8000-000000000001"); u.other != (unique.Handle[string]{}) {
		t.Errorf("a UUID is not kept as its bytes: %+v", u)
	}
}

func TestStoreConcurrentAccess(t *testing.T) {
	paths := []fieldpath.Path{vpcRef}
	ix, shard, _ := newTestIndex(paths...)
	objs := make([]*object, 100)
	for i := range objs {
		objs[i] = dependent(t, paths, "c1", fmt.Sprintf("default/vm-%d", i), fmt.Sprintf(`{"vpcRef":{"name":"vpc-%d"}}`, i%5), false)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 2000 {
			o := objs[i%len(objs)]
			if i%7 == 0 {
				_ = shard.Delete(o)
			} else {
				_ = shard.Add(o)
			}
		}
	})
	for range 3 {
		wg.Go(func() {
			for i := range 2000 {
				for _, d := range ix.Hits(testSource, paths, "c1", "default", fmt.Sprintf("vpc-%d", i%5)) {
					if d.Cluster != "c1" || d.Namespace != "default" {
						t.Errorf("inconsistent hit %+v", d)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}
