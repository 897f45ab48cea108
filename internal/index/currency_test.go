package index

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
)

// The currency of a workspace is that of the shard that serves it, known
// only while the source is synced and the shard's reflector has listed,
// its watch is not broken and it has passed a sample: on a quiet shard the
// samples the reflector has not passed do not count, on a busy one (or
// after a bookmark) they do. Where the currency is known, the index has
// progressed up to the last version its reflector stored or passed.
func TestCurrency(t *testing.T) {
	const shard1, shard2 = "https://shard-1", "https://shard-2"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// samples: the shard's revision sampled at seconds 1, 3 and 5.
	samples := func(st *store.Store, shard string) {
		st.Sampled(shard, at(1), "100")
		st.Sampled(shard, at(3), "110")
		st.Sampled(shard, at(5), "120")
	}
	listed := func(t *testing.T, st *store.Store, shard, rv string) cache.ReflectorStore {
		t.Helper()
		r := st.ForShard(shard, func() {})
		if err := r.Replace(nil, rv); err != nil {
			t.Fatal(err)
		}
		return r
	}
	tests := []struct {
		name    string
		urls    []string
		state   Phase
		inspect bool // the source is only inspected
		cluster logicalcluster.Name
		setup   func(t *testing.T, w *fakeWatch)
		want    int
		wantOK  bool
		wantRV  uint64
	}{
		{name: "quiet: the samples after the list do not count", setup: func(t *testing.T, w *fakeWatch) {
			listed(t, w.store, shard1, "100")
			samples(w.store, shard1)
		}, want: 1, wantOK: true, wantRV: 100},
		{name: "busy: an event passes them", setup: func(t *testing.T, w *fakeWatch) {
			r := listed(t, w.store, shard1, "100")
			samples(w.store, shard1)
			if err := r.Add(dependent(t, w.paths, "c2", "default/vm-1", `{}`, false)); err != nil {
				t.Fatal(err)
			}
			r.(cache.ResourceVersionUpdater).UpdateResourceVersion("115")
		}, want: 3, wantOK: true, wantRV: 115},
		{name: "quiet, after a bookmark", setup: func(t *testing.T, w *fakeWatch) {
			r := listed(t, w.store, shard1, "100")
			samples(w.store, shard1)
			r.(cache.ResourceVersionUpdater).UpdateResourceVersion("120")
		}, want: 5, wantOK: true, wantRV: 120},
		{name: "no sample passed yet", setup: func(t *testing.T, w *fakeWatch) {
			listed(t, w.store, shard1, "90")
			samples(w.store, shard1)
		}},
		{name: "no sample at all", setup: func(t *testing.T, w *fakeWatch) {
			listed(t, w.store, shard1, "200")
		}},
		{name: "not listed", setup: func(t *testing.T, w *fakeWatch) {
			samples(w.store, shard1)
		}},
		{name: "a broken watch", setup: func(t *testing.T, w *fakeWatch) {
			listed(t, w.store, shard1, "200")
			samples(w.store, shard1)
			w.setBroken(shard1, true)
		}},
		{name: "a source that is syncing", state: PhaseSyncing, setup: func(t *testing.T, w *fakeWatch) {
			listed(t, w.store, shard1, "200")
			samples(w.store, shard1)
		}},
		{name: "a source that is only inspected", inspect: true, setup: func(t *testing.T, w *fakeWatch) {
			listed(t, w.store, shard1, "200")
			samples(w.store, shard1)
		}},
		{name: "a workspace whose shard is not known", urls: []string{shard1, shard2}, setup: func(t *testing.T, w *fakeWatch) {
			listed(t, w.store, shard1, "200")
			samples(w.store, shard1)
		}},
		{name: "the shard that serves the workspace", urls: []string{shard1, shard2}, setup: func(t *testing.T, w *fakeWatch) {
			listed(t, w.store, shard1, "200")
			samples(w.store, shard1)
			r := listed(t, w.store, shard2, "105")
			samples(w.store, shard2)
			if err := r.Add(dependent(t, w.paths, "c1", "default/vm-1", `{}`, false)); err != nil {
				t.Fatal(err)
			}
		}, want: 1, wantOK: true, wantRV: 105},
		{name: "a workspace read through a shard", urls: []string{shard1, shard2}, cluster: "c3", setup: func(t *testing.T, w *fakeWatch) {
			listed(t, w.store, shard1, "110")
			samples(w.store, shard1)
			w.ReadThrough("c3", shard1)
		}, want: 3, wantOK: true, wantRV: 110},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := tt.state
			if state == "" {
				state = PhaseSynced
			}
			var paths []fieldpath.Reference
			if !tt.inspect {
				paths = []fieldpath.Reference{vpcRef}
			}
			w := newFakeWatch(State{Phase: state}, paths...)
			w.urls, w.inspected = tt.urls, true
			if w.urls == nil {
				w.urls = []string{shard1}
			}
			ix := newTestIndex(t, w, Options{})
			tt.setup(t, w)
			cluster := tt.cluster
			if cluster == "" {
				cluster = "c1"
			}
			got, ok := ix.Currency(testSource, cluster)
			if ok != tt.wantOK || (ok && !got.Equal(at(tt.want))) {
				t.Errorf("Currency() = %s, %v; want %s, %v", got, ok, at(tt.want), tt.wantOK)
			}
			switch {
			case tt.wantOK && (!ix.Progressed(testSource, cluster, tt.wantRV) || ix.Progressed(testSource, cluster, tt.wantRV+1)):
				t.Errorf("Progressed(%d) = %v, Progressed(%d) = %v; want true, false", tt.wantRV, ix.Progressed(testSource, cluster, tt.wantRV), tt.wantRV+1, ix.Progressed(testSource, cluster, tt.wantRV+1))
			case !tt.wantOK && ix.Progressed(testSource, cluster, 1):
				t.Error("Progressed(1) = true where the currency is not known")
			}
			other := Source{Export: testSource.Export, Resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "disks"}}
			if _, ok := ix.Currency(other, cluster); ok {
				t.Error("a source the index does not watch has a currency")
			}
			if ix.Progressed(other, cluster, 1) {
				t.Error("a source the index does not watch has progressed")
			}
		})
	}
}

// Sources reports the currency of the least current shard of each indexed
// source, zero if that of a shard is not known.
func TestSourcesReportTheLeastCurrency(t *testing.T) {
	const shard1, shard2 = "https://shard-1", "https://shard-2"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := newFakeWatch(State{Phase: PhaseSynced}, vpcRef)
	w.urls, w.inspected = []string{shard1, shard2}, true
	ix := newTestIndex(t, w, Options{})
	status := func() SourceStatus {
		t.Helper()
		got := ix.Sources()
		if len(got) != 1 {
			t.Fatalf("Sources() = %+v", got)
		}
		return got[0]
	}
	if s := status(); !s.Currency.IsZero() || s.CurrencyShards != 2 {
		t.Errorf("nothing listed: currency %s over %d shards", s.Currency, s.CurrencyShards)
	}
	for i, shard := range []string{shard1, shard2} {
		if err := w.store.ForShard(shard, func() {}).Replace(nil, "100"); err != nil {
			t.Fatal(err)
		}
		w.store.Sampled(shard, t0.Add(time.Duration(i)*time.Second), "100")
	}
	if s := status(); !s.Currency.Equal(t0) || s.CurrencyShards != 2 {
		t.Errorf("both listed: currency %s over %d shards, want %s over 2", s.Currency, s.CurrencyShards, t0)
	}
	w.setBroken(shard1, true)
	if s := status(); !s.Currency.IsZero() {
		t.Errorf("with a broken watch: currency %s, want none", s.Currency)
	}
	w.setBroken(shard1, false)
	w.setState(State{Phase: PhaseAccessDenied})
	if s := status(); s.CurrencyShards != 0 {
		t.Errorf("a source without effect: currency over %d shards, want none", s.CurrencyShards)
	}
}

// WaitAdmitted returns once the index sees the id on a dependent of the
// source, follows a watch that replaces the source's, and gives up when
// its context ends or the source is not watched.
func TestWaitAdmitted(t *testing.T) {
	const id = "0123456789abcdef"
	w := newFakeWatch(State{Phase: PhaseSynced}, vpcRef)
	ix := newTestIndex(t, w, Options{})
	done := make(chan struct{})
	ix.watches[testSource] = &running{watch: w, cancel: func() {}, done: done}
	withID := func(name string) *store.Object {
		o := dependent(t, w.paths, "c1", "default/"+name, `{}`, false)
		o.Admission = id
		return o
	}
	ctx := context.Background()

	if _, ok := ix.Admitted(testSource, id); ok {
		t.Error("Admitted() of an id not seen")
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, ok := ix.WaitAdmitted(short, testSource, id); ok {
		t.Error("WaitAdmitted() of an id not seen = true")
	}
	other := Source{Export: testSource.Export, Resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "disks"}}
	if _, ok := ix.WaitAdmitted(ctx, other, id); ok {
		t.Error("WaitAdmitted() of a source not watched = true")
	}

	// The watch is replaced while a decision waits; the new one sees it.
	waited := make(chan bool)
	go func() {
		_, ok := ix.WaitAdmitted(ctx, testSource, id)
		waited <- ok
	}()
	time.Sleep(10 * time.Millisecond)
	next := newFakeWatch(State{Phase: PhaseSynced}, vpcRef, nics)
	ix.lock.Lock()
	ix.watches[testSource] = &running{watch: next, cancel: func() {}, done: make(chan struct{})}
	ix.lock.Unlock()
	close(done)
	time.Sleep(10 * time.Millisecond)
	if err := next.store.ForShard("https://shard-1", func() {}).Add(withID("vm-1")); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-waited:
		if !ok {
			t.Error("WaitAdmitted() = false once the new watch saw the id")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitAdmitted() did not follow the new watch")
	}
	if at, ok := ix.Admitted(testSource, id); !ok || time.Since(at) > time.Minute {
		t.Errorf("Admitted() = %s, %v", at, ok)
	}
	// A watch that stopped and was not replaced: what it saw, at once.
	w = newFakeWatch(State{Phase: PhaseSynced}, vpcRef)
	stopped := make(chan struct{})
	close(stopped)
	ix.watches[testSource] = &running{watch: w, cancel: func() {}, done: stopped}
	if _, ok := ix.WaitAdmitted(ctx, testSource, id); ok {
		t.Error("WaitAdmitted() on a stopped watch that did not see the id = true")
	}
	if err := w.store.ForShard("https://shard-1", func() {}).Update(withID("vm-2")); err != nil {
		t.Fatal(err)
	}
	if _, ok := ix.WaitAdmitted(ctx, testSource, id); !ok {
		t.Error("WaitAdmitted() on a stopped watch that saw the id = false")
	}
}
