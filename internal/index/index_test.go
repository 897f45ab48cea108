package index

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/index/store/storetest"
	"github.com/opendefensecloud/dependency-controller/internal/index/targets"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

var (
	vms        = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
	testSource = Source{Export: kcp.ObjectKey{Cluster: "provider", Name: "compute.io"}, Resource: vms}

	vpcRef = fieldpathtest.MustParse(".spec.vpcRef.name")
	nics   = fieldpathtest.MustParse(".spec.nics[*].vpc")
	backup = fieldpathtest.MustParse(".spec.backupVPC")
)

// fakeWatch is the watch of a source as the index sees it: a state, the
// paths and store of its dependents, and the virtual workspace URLs of its
// export, the shard of a cluster first (as sources.Watch orders them).
type fakeWatch struct {
	paths []fieldpath.Reference
	store *store.Store

	lock      sync.Mutex
	state     State
	urls      []string
	inspected bool
	// readThrough records the calls of ReadThrough.
	readThrough map[logicalcluster.Name]string
	// someShards is set when the watch reads only some shards.
	someShards bool
	// onShards, if set, is called (without the lock) after each call of
	// Shards.
	onShards func()
	// broken are the shards whose watch is broken.
	broken map[string]bool
	// targets is the set of targets of a source without paths, synced
	// once targetsSynced is set and while watchTargets is.
	targets       *targets.Set
	targetsSynced bool
	watchTargets  bool
	// reinspections counts the calls of Reinspect; onReinspect, if set,
	// is called (without the lock) by each, as Run's refresh would read
	// the export again.
	reinspections int
	onReinspect   func()
}

func (w *fakeWatch) Reinspect() {
	w.lock.Lock()
	w.reinspections++
	on := w.onReinspect
	w.lock.Unlock()
	if on != nil {
		on()
	}
}

func newFakeWatch(state State, paths ...fieldpath.Reference) *fakeWatch {
	return &fakeWatch{paths: paths, store: store.New(nil), state: state, readThrough: map[logicalcluster.Name]string{}}
}

func (w *fakeWatch) State() State {
	w.lock.Lock()
	defer w.lock.Unlock()
	return w.state
}

func (w *fakeWatch) setState(state State) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.state = state
}

func (w *fakeWatch) Paths() []fieldpath.Reference { return w.paths }

func (w *fakeWatch) Store() *store.Store { return w.store }

func (w *fakeWatch) Shards(cluster logicalcluster.Name) ([]string, bool) {
	w.lock.Lock()
	urls, inspected := slices.Clone(w.urls), w.inspected
	onShards := w.onShards
	w.lock.Unlock()
	if hint, ok := w.Serving(cluster); ok {
		if i := slices.Index(urls, hint); i > 0 {
			urls[0], urls[i] = urls[i], urls[0]
		}
	}
	if onShards != nil {
		onShards()
	}
	return urls, inspected
}

func (w *fakeWatch) Serving(cluster logicalcluster.Name) (string, bool) {
	if shard, ok := w.store.Shard(cluster); ok {
		return shard, true
	}
	w.lock.Lock()
	defer w.lock.Unlock()
	if len(w.urls) == 1 && !w.someShards {
		return w.urls[0], true
	}
	url, ok := w.readThrough[cluster]
	return url, ok
}

func (w *fakeWatch) ReadThrough(cluster logicalcluster.Name, url string) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.readThrough[cluster] = url
}

// ShardSynced reports a shard as synced once its store has a complete
// list, and while its watch is not broken.
func (w *fakeWatch) ShardSynced(url string) bool {
	w.lock.Lock()
	broken := w.broken[url]
	w.lock.Unlock()
	_, _, listed := w.store.Progress(url)
	return listed && !broken
}

func (w *fakeWatch) SetWatchTargets(on bool) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.watchTargets = on
}

func (w *fakeWatch) Targets() (*targets.Set, bool) {
	w.lock.Lock()
	defer w.lock.Unlock()
	return w.targets, w.targets != nil && w.watchTargets && w.targetsSynced
}

func (w *fakeWatch) setBroken(url string, broken bool) {
	w.lock.Lock()
	defer w.lock.Unlock()
	if w.broken == nil {
		w.broken = map[string]bool{}
	}
	w.broken[url] = broken
}

func (w *fakeWatch) readThroughOf(cluster logicalcluster.Name) string {
	w.lock.Lock()
	defer w.lock.Unlock()
	return w.readThrough[cluster]
}

// newTestIndex returns an index, built as New builds it, that watches
// testSource through w.
func newTestIndex(t testing.TB, w *fakeWatch, opts Options) *Index {
	t.Helper()
	ix, err := New(&rest.Config{}, "", opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	close(done)
	ix.watches[testSource] = &running{watch: w, cancel: func() {}, done: done}
	return ix
}

// dependent returns what a reflector would hand the store (see
// storetest.DependentJSON), decoded.
func dependent(t testing.TB, paths []fieldpath.Reference, cluster, nsName, spec string, terminating bool) *store.Object {
	t.Helper()
	o, err := store.Decode(storetest.DependentJSON(cluster, nsName, spec, terminating), paths)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestIndexHits(t *testing.T) {
	paths := []fieldpath.Reference{vpcRef, nics, backup}
	w := newFakeWatch(State{Phase: PhaseSynced}, paths...)
	ix := newTestIndex(t, w, Options{})
	shard1, shard2 := w.store.ForShard("shard-1", func() {}), w.store.ForShard("shard-2", func() {})
	add := func(s interface{ Add(any) error }, cluster, nsName, spec string, terminating bool) {
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
		paths     []fieldpath.Reference
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
		{name: "another namespace", paths: paths, cluster: "c1", namespace: "other", want: []string{"c1//gateway", "c1/other/vm-3"}},
		{name: "only the paths asked for", paths: []fieldpath.Reference{nics}, cluster: "c1", namespace: "default", want: []string{"c1/default/vm-2", "c1/default/vm-both"}},
		{name: "paths asked for in another order", paths: []fieldpath.Reference{backup, nics}, cluster: "c1", want: []string{"c1//gateway", "c1/default/vm-2", "c1/default/vm-both"}},
		{name: "other clusters are apart", paths: paths, cluster: "c2", namespace: "default", want: []string{"c2/default/vm-1"}},
		{name: "a path the source does not read", paths: []fieldpath.Reference{fieldpathtest.MustParse(".spec.other")}, cluster: "c1", want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := storetest.Names(ix.Hits(testSource, tt.paths, tt.cluster, tt.namespace, "vpc-a"))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Hits() = %v, want %v", got, tt.want)
			}
		})
	}

	// Update: vm-1 now references another VPC.
	add(shard1, "c1", "default/vm-1", `{"vpcRef":{"name":"vpc-b"}}`, false)
	if got := storetest.Names(ix.Hits(testSource, paths, "c1", "default", "vpc-b")); !slices.Equal(got, []string{"c1/default/vm-1"}) {
		t.Errorf("after update, references to vpc-b: %v", got)
	}
	if got := storetest.Names(ix.Hits(testSource, []fieldpath.Reference{vpcRef}, "c1", "default", "vpc-a")); slices.Contains(got, "c1/default/vm-1") {
		t.Errorf("after update, vm-1 still references vpc-a: %v", got)
	}

	// Delete.
	if err := shard1.Delete(dependent(t, paths, "c1", "default/vm-2", `{}`, false)); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Names(ix.Hits(testSource, []fieldpath.Reference{nics}, "c1", "default", "vpc-a")); !slices.Equal(got, []string{"c1/default/vm-both"}) {
		t.Errorf("after delete: %v", got)
	}

	// Replace of one shard leaves the other shard alone.
	if err := shard1.Replace([]any{dependent(t, paths, "c1", "default/vm-new", `{"vpcRef":{"name":"vpc-a"}}`, false)}, "100"); err != nil {
		t.Fatal(err)
	}
	if got := storetest.Names(ix.Hits(testSource, paths, "c1", "", "vpc-a")); !slices.Equal(got, []string{"c1/default/vm-new"}) {
		t.Errorf("after Replace on shard-1: %v", got)
	}
	if got := storetest.Names(ix.Hits(testSource, paths, "c2", "", "vpc-a")); len(got) != 1 {
		t.Errorf("Replace on shard-1 touched shard-2: %v", got)
	}
	if shard, _ := w.store.Shard("c2"); shard != "shard-2" {
		t.Errorf("shard of c2 = %q", shard)
	}
	if ix.Len() != 2 {
		t.Errorf("Len() = %d, want 2", ix.Len())
	}
	if got := ix.Hits(Source{Export: testSource.Export, Resource: vms.GroupResource().WithVersion("v2")}, paths, "c1", "", "vpc-a"); got != nil {
		t.Errorf("a source that is not watched has hits: %v", got)
	}
}

// The state of a source is its watch's; Synced waits for every source that
// is Syncing.
func TestStateAndSynced(t *testing.T) {
	w := newFakeWatch(State{Phase: PhaseSyncing, Message: "Listing"})
	ix := newTestIndex(t, w, Options{})
	if err := ix.Synced(); err == nil {
		t.Error("Synced() before the index started")
	}
	ix.ctx = t.Context()
	if err := ix.Synced(); err == nil || !strings.Contains(err.Error(), "Listing") || !strings.Contains(err.Error(), testSource.String()) {
		t.Errorf("Synced() with a source Syncing = %v", err)
	}
	for _, phase := range []Phase{PhaseSynced, PhaseAccessDenied, PhaseVersionNotServed} {
		w.setState(State{Phase: phase})
		if err := ix.Synced(); err != nil {
			t.Errorf("Synced() with a source %s = %v", phase, err)
		}
		if got := ix.State(testSource); got.Phase != phase {
			t.Errorf("State() = %+v, want %s", got, phase)
		}
	}
	if got := ix.State(Source{Export: testSource.Export, Resource: vms.GroupResource().WithVersion("v2")}); got.Phase != PhaseSyncing {
		t.Errorf("State() of a source that is not watched = %+v, want Syncing", got)
	}
}

// Sources reports every watched source with its state and the number of its
// indexed dependents.
func TestSources(t *testing.T) {
	w := newFakeWatch(State{Phase: PhaseSynced, Message: "Indexing"}, vpcRef)
	ix := newTestIndex(t, w, Options{})
	shard := w.store.ForShard("shard-1", func() {})
	for _, name := range []string{"default/vm-1", "default/vm-2"} {
		if err := shard.Add(dependent(t, []fieldpath.Reference{vpcRef}, "c1", name, `{"vpcRef":{"name":"vpc-a"}}`, false)); err != nil {
			t.Fatal(err)
		}
	}
	inspected := Source{Export: kcp.ObjectKey{Cluster: "provider", Name: "network.io"}, Resource: schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}}
	done := make(chan struct{})
	close(done)
	ix.watches[inspected] = &running{watch: newFakeWatch(State{Phase: PhaseAccessDenied}), cancel: func() {}, done: done}

	got := ix.Sources()
	slices.SortFunc(got, func(a, b SourceStatus) int { return strings.Compare(a.Source.String(), b.Source.String()) })
	want := []SourceStatus{
		{Source: testSource, State: State{Phase: PhaseSynced, Message: "Indexing"}, Indexed: 2},
		{Source: inspected, State: State{Phase: PhaseAccessDenied}, Indexed: 0},
	}
	if len(got) != len(want) {
		t.Fatalf("Sources() = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Source != want[i].Source || !got[i].State.Equal(want[i].State) || got[i].Indexed != want[i].Indexed {
			t.Errorf("Sources()[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if n := ix.Len(); n != 2 {
		t.Errorf("Len() = %d, want the sum over the sources, 2", n)
	}
}
