package index

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/index/targets"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// Holders passes every indexed dependent that holds a reference and is not
// being deleted, with its references and the paths they index; a source
// that is only inspected has none.
func TestHolders(t *testing.T) {
	paths := []fieldpath.Reference{vpcRef, nics}
	w := newFakeWatch(State{Phase: PhaseSynced}, paths...)
	ix := newTestIndex(t, w, Options{})
	rs := w.store.ForShard("https://shard-1", func() {})
	for _, o := range []*store.Object{
		dependent(t, paths, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-a"},"nics":[{"vpc":"vpc-b"}]}`, false),
		dependent(t, paths, "c1", "default/vm-2", `{}`, false),
		dependent(t, paths, "c1", "default/vm-3", `{"vpcRef":{"name":"vpc-a"}}`, true),
		dependent(t, paths, "c2", "gw", `{"vpcRef":{"name":"vpc-c"}}`, false),
	} {
		if err := rs.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	ok := ix.Holders(testSource, func(p []fieldpath.Reference, h *Holder) {
		if !slices.Equal(p, paths) {
			t.Errorf("paths %v, want %v", p, paths)
		}
		for _, r := range h.Refs() {
			got = append(got, h.Cluster().String()+"/"+h.Namespace()+"/"+h.Meta().Name+" "+p[r.Path].String()+"="+r.Name)
		}
	})
	slices.Sort(got)
	want := []string{"c1/default/vm-1 .spec.nics[*].vpc=vpc-b", "c1/default/vm-1 .spec.vpcRef.name=vpc-a", "c2//gw .spec.vpcRef.name=vpc-c"}
	if !ok || !slices.Equal(got, want) {
		t.Errorf("Holders() = %v, %v; want %v", ok, got, want)
	}
	other := Source{Export: kcp.ObjectKey{Cluster: "net", Name: "network.io"}, Resource: schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}}
	if ix.Holders(other, func([]fieldpath.Reference, *Holder) { t.Error("called for a source the index does not watch") }) {
		t.Error("Holders() of a source the index does not watch")
	}
}

// Existing answers from the store of an indexed source while it is
// Synced, and from the set of targets of a source without paths once that
// is complete and while targets are watched; WatchTargets reaches every
// watch.
func TestExisting(t *testing.T) {
	t.Run("indexed", func(t *testing.T) {
		w := newFakeWatch(State{Phase: PhaseSyncing}, vpcRef)
		ix := newTestIndex(t, w, Options{})
		if err := w.store.ForShard("https://shard-1", func() {}).Add(dependent(t, w.paths, "c1", "default/vm-1", `{}`, false)); err != nil {
			t.Fatal(err)
		}
		if _, ok := ix.Existing(testSource); ok {
			t.Error("a Syncing source claims to know every object")
		}
		w.setState(State{Phase: PhaseSynced})
		e, ok := ix.Existing(testSource)
		if !ok || !e.Has("c1", "default", "vm-1") || e.Has("c1", "other", "vm-1") || !e.Named("c1", "vm-1") || e.Named("c2", "vm-1") {
			t.Errorf("Existing() of a Synced indexed source: %v", ok)
		}
	})
	t.Run("targets", func(t *testing.T) {
		w := newFakeWatch(State{Phase: PhaseSynced})
		w.targets = targets.New(nil, nil)
		ix := newTestIndex(t, w, Options{})
		if err := w.targets.ForShard("https://shard-1", func() {}).Replace([]any{dependent(t, nil, "c1", "default/vpc-a", `{}`, false)}, "1"); err != nil {
			t.Fatal(err)
		}
		w.targetsSynced = true
		if _, ok := ix.Existing(testSource); ok {
			t.Error("targets not watched, yet known")
		}
		ix.WatchTargets(true)
		e, ok := ix.Existing(testSource)
		if !ok || !e.Has("c1", "default", "vpc-a") || e.Has("c1", "default", "vpc-b") {
			t.Errorf("Existing() of watched targets: %v", ok)
		}
		ix.WatchTargets(false)
		if _, ok := ix.Existing(testSource); ok {
			t.Error("targets no longer watched, yet known")
		}
	})
	t.Run("not watched", func(t *testing.T) {
		ix := newTestIndex(t, newFakeWatch(State{Phase: PhaseSynced}), Options{})
		other := Source{Export: kcp.ObjectKey{Cluster: "net", Name: "network.io"}, Resource: schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}}
		if e, ok := ix.Existing(other); ok || e != nil {
			t.Errorf("Existing() of a source the index does not watch = %v, %v", e, ok)
		}
	})
}
