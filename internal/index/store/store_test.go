package store

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unique"
	"unsafe"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index/store/storetest"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

var (
	vpcRef = fieldpathtest.MustParse(".spec.vpcRef.name")
	nics   = fieldpathtest.MustParse(".spec.nics[*].vpc")
	backup = fieldpathtest.MustParse(".spec.backupVPC")
)

// dependent returns what a reflector would hand the store (see
// storetest.DependentJSON), decoded.
func dependent(t testing.TB, paths []fieldpath.Reference, cluster, nsName, spec string, terminating bool) *Object {
	t.Helper()
	o, err := Decode(storetest.DependentJSON(cluster, nsName, spec, terminating), paths)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func add(t *testing.T, s cache.ReflectorStore, o *Object) {
	t.Helper()
	if err := s.Add(o); err != nil {
		t.Fatal(err)
	}
}

func TestStoreReferencing(t *testing.T) {
	paths := []fieldpath.Reference{vpcRef, nics, backup}
	all := []int{0, 1, 2}
	s := New(nil)
	syncs := 0
	shard1, shard2 := s.ForShard("shard-1", func() { syncs++ }), s.ForShard("shard-2", func() { syncs++ })
	put := func(shard cache.ReflectorStore, cluster, nsName, spec string, terminating bool) {
		t.Helper()
		add(t, shard, dependent(t, paths, cluster, nsName, spec, terminating))
	}
	put(shard1, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-a"}}`, false)
	put(shard1, "c1", "default/vm-2", `{"nics":[{"vpc":"vpc-x"},{"vpc":"vpc-a"}]}`, false)
	put(shard1, "c1", "other/vm-3", `{"vpcRef":{"name":"vpc-a"}}`, false)
	put(shard1, "c1", "gateway", `{"backupVPC":"vpc-a"}`, false) // cluster-scoped
	put(shard1, "c1", "default/vm-dying", `{"vpcRef":{"name":"vpc-a"}}`, true)
	put(shard1, "c1", "default/vm-both", `{"vpcRef":{"name":"vpc-a"},"nics":[{"vpc":"vpc-a"},{"vpc":"vpc-a"}]}`, false)
	put(shard2, "c2", "default/vm-1", `{"vpcRef":{"name":"vpc-a"}}`, false)
	if syncs != 0 {
		t.Errorf("Add reported %d complete lists", syncs)
	}

	tests := []struct {
		name    string
		cluster logicalcluster.Name
		paths   []int
		value   string
		want    []string
	}{
		{
			name: "every namespace and cluster-scoped dependents, each once; terminating ones marked", cluster: "c1", paths: all, value: "vpc-a",
			want: []string{"c1//gateway", "c1/default/vm-1", "c1/default/vm-2", "c1/default/vm-both", "c1/default/vm-dying (terminating)", "c1/other/vm-3"},
		},
		{name: "only the paths asked for", cluster: "c1", paths: []int{1}, value: "vpc-a", want: []string{"c1/default/vm-2", "c1/default/vm-both"}},
		{name: "another value at the same path", cluster: "c1", paths: []int{1}, value: "vpc-x", want: []string{"c1/default/vm-2"}},
		{name: "a value at another path than asked", cluster: "c1", paths: []int{0, 2}, value: "vpc-x", want: []string{}},
		{name: "other clusters are apart", cluster: "c2", paths: all, value: "vpc-a", want: []string{"c2/default/vm-1"}},
		{name: "a cluster without dependents", cluster: "c3", paths: all, value: "vpc-a", want: []string{}},
		{name: "no paths", cluster: "c1", paths: nil, value: "vpc-a", want: []string{}},
		{name: "a value nobody holds", cluster: "c1", paths: all, value: "vpc-z", want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := storetest.Names(s.Referencing(tt.cluster, tt.paths, "", tt.value)); !slices.Equal(got, tt.want) {
				t.Errorf("Referencing(%s, %v, %s) = %v, want %v", tt.cluster, tt.paths, tt.value, got, tt.want)
			}
		})
	}
	if s.Len() != 7 {
		t.Errorf("Len() = %d, want 7", s.Len())
	}

	// Update: vm-1 now references another VPC, and is unlinked from the old one.
	put(shard1, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-b"}}`, false)
	if got := storetest.Names(s.Referencing("c1", all, "", "vpc-b")); !slices.Equal(got, []string{"c1/default/vm-1"}) {
		t.Errorf("after update, references to vpc-b: %v", got)
	}
	if got := storetest.Names(s.Referencing("c1", []int{0}, "", "vpc-a")); slices.Contains(got, "c1/default/vm-1") {
		t.Errorf("after update, vm-1 still references vpc-a: %v", got)
	}
	if s.Len() != 7 {
		t.Errorf("an update changed Len() to %d", s.Len())
	}
	// An update that is now terminating.
	put(shard1, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-b"}}`, true)
	if got := storetest.Names(s.Referencing("c1", all, "", "vpc-b")); !slices.Equal(got, []string{"c1/default/vm-1 (terminating)"}) {
		t.Errorf("after update to terminating: %v", got)
	}

	// Delete (by what the reflector hands over: the last known object).
	if err := shard1.Delete(dependent(t, paths, "c1", "default/vm-2", `{}`, false)); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Names(s.Referencing("c1", []int{1}, "", "vpc-a")); !slices.Equal(got, []string{"c1/default/vm-both"}) {
		t.Errorf("after delete: %v", got)
	}
	if got := s.Referencing("c1", []int{1}, "", "vpc-x"); len(got) != 0 {
		t.Errorf("after delete, vpc-x is still referenced: %v", got)
	}
	// Deleting what is not there, or the same name in another namespace, changes nothing.
	if err := shard1.Delete(dependent(t, paths, "c1", "nowhere/vm-both", `{}`, false)); err != nil {
		t.Fatal(err)
	}
	if err := shard2.Delete(dependent(t, paths, "c1", "default/vm-both", `{}`, false)); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Names(s.Referencing("c1", []int{1}, "", "vpc-a")); !slices.Equal(got, []string{"c1/default/vm-both"}) {
		t.Errorf("a delete of another object removed vm-both: %v", got)
	}

	// Replace of one shard leaves the other shard alone.
	if err := shard1.Replace([]any{dependent(t, paths, "c1", "default/vm-new", `{"vpcRef":{"name":"vpc-a"}}`, false)}, "100"); err != nil {
		t.Fatal(err)
	}
	if syncs != 1 {
		t.Errorf("Replace reported %d complete lists, want 1", syncs)
	}
	if got := storetest.Names(s.Referencing("c1", all, "", "vpc-a")); !slices.Equal(got, []string{"c1/default/vm-new"}) {
		t.Errorf("after Replace on shard-1: %v", got)
	}
	if got := s.Referencing("c1", all, "", "vpc-b"); len(got) != 0 {
		t.Errorf("after Replace on shard-1, vm-1 is still indexed: %v", got)
	}
	if got := storetest.Names(s.Referencing("c2", all, "", "vpc-a")); !slices.Equal(got, []string{"c2/default/vm-1"}) {
		t.Errorf("Replace on shard-1 touched shard-2: %v", got)
	}
	if shard, ok := s.Shard("c2"); !ok || shard != "shard-2" {
		t.Errorf("Shard(c2) = %q, %v", shard, ok)
	}
	if shard, ok := s.Shard("c1"); !ok || shard != "shard-1" {
		t.Errorf("Shard(c1) = %q, %v", shard, ok)
	}
	if _, ok := s.Shard("c3"); ok {
		t.Error("a cluster without dependents has a shard")
	}
	if s.Len() != 2 {
		t.Errorf("Len() = %d, want 2", s.Len())
	}

	// A shard whose reflector stopped takes its dependents with it.
	s.DropShard("shard-2")
	if got := s.Referencing("c2", all, "", "vpc-a"); len(got) != 0 {
		t.Errorf("after DropShard: %v", got)
	}
	if _, ok := s.Shard("c2"); ok || s.Holds("c2") {
		t.Error("after DropShard, c2 is still known")
	}
	if s.Len() != 1 || !s.Holds("c1") {
		t.Errorf("DropShard(shard-2) touched shard-1: Len() = %d", s.Len())
	}
	if len(s.refs) != 1 {
		t.Errorf("the reverse index keeps %d keys, want 1: %v", len(s.refs), s.refs)
	}
}

// Holds counts the dependents of each cluster: a cluster holds dependents
// as long as one of them is indexed on any shard.
func TestStoreHolds(t *testing.T) {
	s := New(nil)
	shard1, shard2 := s.ForShard("shard-1", func() {}), s.ForShard("shard-2", func() {})
	vm1 := dependent(t, nil, "c1", "default/vm-1", `{}`, false)
	vm2 := dependent(t, nil, "c2", "vm-2", `{}`, false)
	add(t, shard1, vm1)
	add(t, shard1, vm1) // an update does not count twice
	add(t, shard2, dependent(t, nil, "c1", "other/vm-1", `{}`, false))
	if !s.Holds("c1") || s.Holds("c2") {
		t.Fatalf("Holds(c1) = %v, Holds(c2) = %v", s.Holds("c1"), s.Holds("c2"))
	}
	if err := shard1.Delete(vm1); err != nil {
		t.Fatal(err)
	}
	if !s.Holds("c1") {
		t.Error("c1 has a dependent left on shard-2, but Holds(c1) = false")
	}
	s.DropShard("shard-2")
	if s.Holds("c1") {
		t.Error("Holds(c1) after its last dependent was removed")
	}
	// A complete listing counts anew.
	if err := shard1.Replace([]any{vm1, vm2}, ""); err != nil {
		t.Fatal(err)
	}
	if !s.Holds("c1") || !s.Holds("c2") || s.Holds("c9") {
		t.Errorf("after Replace: Holds(c1) = %v, Holds(c2) = %v, Holds(c9) = %v", s.Holds("c1"), s.Holds("c2"), s.Holds("c9"))
	}
	if err := shard1.Replace([]any{vm1, vm1}, ""); err != nil || !s.Holds("c1") || s.Holds("c2") {
		t.Errorf("after a Replace with vm-1 twice: Holds(c1) = %v, Holds(c2) = %v (%v)", s.Holds("c1"), s.Holds("c2"), err)
	}
	if err := shard1.Delete(vm1); err != nil || s.Holds("c1") {
		t.Errorf("an object listed twice is still held after its delete (%v)", err)
	}
	if err := shard1.Replace(nil, ""); err != nil || s.Holds("c1") || s.Len() != 0 {
		t.Errorf("after an empty Replace: Holds(c1) = %v, Len() = %d (%v)", s.Holds("c1"), s.Len(), err)
	}
	if len(s.count) != 0 || len(s.shardOf) != 0 || len(s.refs) != 0 {
		t.Errorf("an empty store keeps counts %v, shards %v, references %v", s.count, s.shardOf, s.refs)
	}
}

// The store hands the reflector an error for anything but an Object.
func TestShardStoreRejectsOtherObjects(t *testing.T) {
	shard := New(nil).ForShard("shard-1", func() { t.Error("a failed Replace reported a complete list") })
	if err := shard.Add("not an object"); err == nil {
		t.Error("Add accepted a string")
	}
	if err := shard.Update(&ObjectList{}); err == nil {
		t.Error("Update accepted a list")
	}
	if err := shard.Delete(42); err == nil {
		t.Error("Delete accepted a number")
	}
	if err := shard.Replace([]any{&Object{}, "x"}, ""); err == nil {
		t.Error("Replace accepted a string")
	}
	if err := shard.Resync(); err != nil {
		t.Errorf("Resync() = %v", err)
	}
}

// The store keeps nothing of a dependent but what decisions need.
func TestStoreKeepsOnlyWhatDecisionsNeed(t *testing.T) {
	paths := []fieldpath.Reference{vpcRef}
	s := New(nil)
	shard := s.ForShard("shard-1", func() {})
	o := dependent(t, paths, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-a"},"userData":"`+strings.Repeat("x", 4096)+`"}`, false)
	add(t, shard, o)
	e := s.objects["shard-1"][objKey{scope: unique.Make(scope{cluster: "c1", namespace: "default"}), name: "vm-1"}]
	if e == nil {
		t.Fatal("vm-1 is not stored")
	}
	want := entry{scope: unique.Make(scope{cluster: "c1", namespace: "default"}), name: "vm-1", uid: uid{other: unique.Make("uid-vm-1")},
		revision: revisionKey("uid-vm-1", ""), refs: []ref{{path: 0, value: "vpc-a"}}}
	if !reflect.DeepEqual(*e, want) {
		t.Errorf("stored %+v, want %+v", *e, want)
	}
	if got, want := e.dependent(), (kcp.Meta{Cluster: "c1", Namespace: "default", Name: "vm-1", UID: "uid-vm-1"}); got != want {
		t.Errorf("dependent() = %+v, want %+v", got, want)
	}
}

// A name that many dependents reference is stored once.
func TestStoreSharesReferencedNames(t *testing.T) {
	paths := []fieldpath.Reference{vpcRef, nics}
	s := New(nil)
	shard := s.ForShard("shard-1", func() {})
	add(t, shard, dependent(t, paths, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-a"}}`, false))
	add(t, shard, dependent(t, paths, "c1", "default/vm-2", `{"vpcRef":{"name":"vpc-b"},"nics":[{"vpc":"vpc-a"}]}`, false))
	e1 := s.objects["shard-1"][objKey{scope: unique.Make(scope{cluster: "c1", namespace: "default"}), name: "vm-1"}]
	e2 := s.objects["shard-1"][objKey{scope: unique.Make(scope{cluster: "c1", namespace: "default"}), name: "vm-2"}]
	if e1 == nil || e2 == nil || len(e2.refs) != 2 {
		t.Fatalf("stored %+v and %+v", e1, e2)
	}
	if unsafe.StringData(e2.refs[1].value) != unsafe.StringData(e1.refs[0].value) {
		t.Error("vm-2 keeps its own copy of vpc-a")
	}
	if unsafe.StringData(e2.refs[0].value) == unsafe.StringData(e1.refs[0].value) {
		t.Error("vm-2's vpc-b shares vm-1's vpc-a")
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
	paths := []fieldpath.Reference{vpcRef}
	s := New(nil)
	shard := s.ForShard("shard-1", func() {})
	objs := make([]*Object, 100)
	for i := range objs {
		objs[i] = dependent(t, paths, "c1", fmt.Sprintf("default/vm-%d", i), fmt.Sprintf(`{"vpcRef":{"name":"vpc-%d"}}`, i%5), false)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 2000 {
			o := objs[i%len(objs)]
			switch {
			case i%500 == 0:
				_ = shard.Replace([]any{objs[0], objs[1]}, "")
			case i%7 == 0:
				_ = shard.Delete(o)
			default:
				_ = shard.Add(o)
			}
		}
	})
	for range 3 {
		wg.Go(func() {
			for i := range 2000 {
				value := fmt.Sprintf("vpc-%d", i%5)
				for _, d := range s.Referencing("c1", []int{0}, "", value) {
					if d.Cluster != "c1" || d.Namespace != "default" {
						t.Errorf("inconsistent hit %+v", d)
						return
					}
				}
				_ = s.Holds("c1")
				_, _ = s.Shard("c1")
				_ = s.Len()
			}
		})
	}
	wg.Wait()
	// What is left is consistent: every indexed dependent is found under
	// what it references, and nothing else is.
	n := 0
	for v := range 5 {
		for _, d := range s.Referencing("c1", []int{0}, "", fmt.Sprintf("vpc-%d", v)) {
			var i int
			if _, err := fmt.Sscanf(d.Name, "vm-%d", &i); err != nil || i%5 != v {
				t.Errorf("%s is found under vpc-%d", d.Name, v)
			}
			n++
		}
	}
	if n != s.Len() {
		t.Errorf("%d dependents found by reference, Len() = %d", n, s.Len())
	}
}

// References that name a namespace reach across namespaces; those that do
// not name the dependent's own, or any for a cluster-scoped dependent; kinds
// that a rule does not protect are not indexed at all.
func TestStoreReferencingAcrossNamespaces(t *testing.T) {
	parents := fieldpathtest.MustParseReference(fieldpath.ReferenceSpec{Path: ".spec.parentRefs[*].name", NamespacePath: "namespace",
		GroupPath: "group", Group: "gateway.test.io", KindPath: "kind", Kind: "Gateway"})
	paths := []fieldpath.Reference{parents}
	s := New(nil)
	shard := s.ForShard("shard-1", func() {})
	add(t, shard, dependent(t, paths, "c1", "apps/route-1", `{"parentRefs":[{"name":"edge","namespace":"infra"},{"name":"local"},{"name":"svc","kind":"Service","group":""}]}`, false))
	add(t, shard, dependent(t, paths, "c1", "apps/route-2", `{"parentRefs":[{"name":"edge","namespace":"apps"},{"name":"local","namespace":""}]}`, false))
	add(t, shard, dependent(t, paths, "c1", "cluster-route", `{"parentRefs":[{"name":"edge","namespace":"infra"},{"name":"anywhere"}]}`, false))

	tests := []struct {
		namespace, name string
		want            []string
	}{
		{"infra", "edge", []string{"c1//cluster-route", "c1/apps/route-1"}},
		{"apps", "edge", []string{"c1/apps/route-2"}},
		{"apps", "local", []string{"c1/apps/route-1", "c1/apps/route-2"}},
		{"infra", "local", nil},
		{"apps", "svc", nil},
		{"infra", "anywhere", []string{"c1//cluster-route"}},
		{"apps", "anywhere", []string{"c1//cluster-route"}},
		// A cluster-scoped target is named from anywhere.
		{"", "edge", []string{"c1//cluster-route", "c1/apps/route-1", "c1/apps/route-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.namespace+"/"+tt.name, func(t *testing.T) {
			got := storetest.Names(s.Referencing("c1", []int{0}, tt.namespace, tt.name))
			if !slices.Equal(got, tt.want) && (len(got) != 0 || len(tt.want) != 0) {
				t.Errorf("Referencing(%s/%s) = %v, want %v", tt.namespace, tt.name, got, tt.want)
			}
		})
	}
}

func TestAny(t *testing.T) {
	s := New(nil)
	if _, ok := s.Any("shard-1"); ok {
		t.Fatal("an empty store has one")
	}
	st := s.ForShard("shard-1", func() {})
	if err := st.Replace([]any{dependent(t, nil, "c1", "default/vm-1", `{}`, true), dependent(t, nil, "c1", "default/vm-2", `{}`, false)}, "5"); err != nil {
		t.Fatal(err)
	}
	got, ok := s.Any("shard-1")
	if !ok || got.Name != "vm-2" {
		t.Errorf("Any = %+v, %v; want vm-2, the one not being deleted", got, ok)
	}
	if _, ok := s.Any("shard-2"); ok {
		t.Error("another shard has one")
	}

	// One that holds a reference is preferred (a probe can rename it).
	paths := []fieldpath.Reference{vpcRef}
	refs := New(nil)
	objs := []any{dependent(t, paths, "c1", "default/vm-held", `{"vpcRef":{"name":"vpc-a"}}`, true)}
	for i := range 20 {
		objs = append(objs, dependent(t, paths, "c1", fmt.Sprintf("default/vm-%d", i), `{}`, false))
	}
	objs = append(objs, dependent(t, paths, "c1", "default/vm-ref", `{"vpcRef":{"name":"vpc-a"}}`, false))
	if err := refs.ForShard("shard-1", func() {}).Replace(objs, "5"); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if got, ok := refs.Any("shard-1"); !ok || got.Name != "vm-ref" {
			t.Fatalf("Any = %+v, %v; want vm-ref, the one that holds a reference and is not being deleted", got, ok)
		}
	}
}

func TestLargest(t *testing.T) {
	paths := []fieldpath.Reference{vpcRef, nics}
	manyNICs := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"nics":[`)
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"vpc":"vpc-%d"}`, i)
		}
		b.WriteString("]}")
		return b.String()
	}
	type dep struct{ shard, cluster, nsName, spec string }
	tests := []struct {
		name      string
		deps      []dep
		wantWho   string
		wantCount int
	}{
		{name: "an empty store has none"},
		{name: "dependents without references are none", deps: []dep{{"s1", "c1", "default/vm-1", `{}`}}},
		{name: "the dependent with the most references, on any shard", deps: []dep{
			{"s1", "c1", "default/vm-1", manyNICs(3)}, {"s2", "c2", "default/vm-2", manyNICs(40)}, {"s1", "c1", "other/vm-3", `{"vpcRef":{"name":"a"}}`}},
			wantWho: "c2/default/vm-2", wantCount: 40},
		{name: "a name repeated at one path counts once, at two paths twice", deps: []dep{
			{"s1", "c1", "default/vm-1", `{"vpcRef":{"name":"a"},"nics":[{"vpc":"a"},{"vpc":"a"},{"vpc":"b"}]}`}},
			wantWho: "c1/default/vm-1", wantCount: 3},
		{name: "many repeats count once", deps: []dep{
			{"s1", "c1", "default/vm-1", `{"nics":[` + strings.Repeat(`{"vpc":"a"},`, 40) + `{"vpc":"b"}]}`}, {"s1", "c1", "default/vm-2", manyNICs(3)}},
			wantWho: "c1/default/vm-2", wantCount: 3},
		{name: "of dependents with as many, the first by cluster, namespace and name", deps: []dep{
			{"s1", "c2", "a/vm-1", manyNICs(5)}, {"s1", "c1", "b/vm-2", manyNICs(5)}, {"s2", "c1", "b/vm-1", manyNICs(5)}, {"s1", "c1", "c/vm-0", manyNICs(5)}},
			wantWho: "c1/b/vm-1", wantCount: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(nil)
			for _, d := range tt.deps {
				add(t, s.ForShard(d.shard, func() {}), dependent(t, paths, d.cluster, d.nsName, d.spec, false))
			}
			got, n := s.Largest()
			who := ""
			if n > 0 {
				who = storetest.Names([]kcp.Meta{got})[0]
			}
			if who != tt.wantWho || n != tt.wantCount {
				t.Errorf("Largest() = %s with %d, want %s with %d", who, n, tt.wantWho, tt.wantCount)
			}
		})
	}
}

// Every change calls the changed hook with the workspace of the dependent
// that changed; a complete list of a shard, which may change any, with
// none.
func TestChangedNamesTheWorkspace(t *testing.T) {
	paths := []fieldpath.Reference{vpcRef}
	var got []string
	s := New(func(cluster logicalcluster.Name) { got = append(got, cluster.String()) })
	rs := s.ForShard("shard-1", func() {})
	vm1 := dependent(t, paths, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-a"}}`, false)
	vm2 := dependent(t, paths, "c2", "default/vm-2", `{"vpcRef":{"name":"vpc-a"}}`, false)
	steps := []func() error{
		func() error { return rs.Replace([]any{vm1}, "10") },
		func() error { return rs.Add(vm2) },
		func() error { return rs.Update(vm1) },
		func() error { return rs.Delete(vm2) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if want := []string{"", "c2", "c1", "c2"}; !slices.Equal(got, want) {
		t.Errorf("changed called with %q, want %q", got, want)
	}
}
