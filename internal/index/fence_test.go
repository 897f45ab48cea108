package index

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// versionShard serves the virtual workspace of one shard for fences: every
// LIST answers an empty list at the current resourceVersion, or fails
// with status while it is set.
type versionShard struct {
	lock     sync.Mutex
	rv       string
	status   int
	requests []string
}

func (s *versionShard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.lock.Lock()
	s.requests = append(s.requests, r.URL.Path+"?"+r.URL.RawQuery)
	rv, code := s.rv, s.status
	s.lock.Unlock()
	if code != 0 {
		status(code, http.StatusText(code), "boom", "")(w)
		return
	}
	fmt.Fprintf(w, `{"kind":"VirtualMachineList","metadata":{"resourceVersion":%q},"items":[]}`, rv)
}

// set answers every LIST at rv from now on, without failing.
func (s *versionShard) set(rv string) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.rv, s.status = rv, 0
}

func (s *versionShard) requested() []string {
	s.lock.Lock()
	defer s.lock.Unlock()
	return slices.Clone(s.requests)
}

// clock is a settable ix.now.
type clock struct {
	lock sync.Mutex
	t    time.Time
}

func (c *clock) now() time.Time {
	c.lock.Lock()
	defer c.lock.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.lock.Lock()
	defer c.lock.Unlock()
	c.t = c.t.Add(d)
}

// fencedIndex returns an index whose source testSource (namespaced,
// Synced, indexing .spec.vpcRef.name) is served by the given shards, the
// watch of it, and its clock.
func fencedIndex(t *testing.T, shards ...http.Handler) (*Index, *fakeWatch, *clock) {
	t.Helper()
	w := newFakeWatch(State{Phase: PhaseSynced, Namespaced: true}, vpcRef)
	w.inspected = true
	for _, s := range shards {
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		w.urls = append(w.urls, srv.URL)
	}
	ix := newTestIndex(t, w, Options{})
	c := &clock{t: time.Now()}
	ix.now = c.now
	return ix, w, c
}

// vpcs is the resource the dependents of testSource reference.
var vpcs = schema.GroupResource{Group: "network.io", Resource: "vpcs"}

// fenceQuery asks whether the index holds every VirtualMachine of c1 that
// can reference default/vpc-a.
var fenceQuery = Query{Source: testSource, Paths: []fieldpath.Reference{vpcRef}, Cluster: "c1", Namespace: "default", Name: "vpc-a", Target: vpcs}

const fenceRequest = "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines?limit=1"

// progressTo records that the reflector of the watch's first shard stored
// a complete list at rv.
func progressTo(t *testing.T, w *fakeWatch, rv string) cache.ReflectorStore {
	t.Helper()
	s := w.store.ForShard(w.urls[0], func() {})
	if err := s.Replace(nil, rv); err != nil {
		t.Fatal(err)
	}
	return s
}

// Fenced declines, without reading anything, wherever the index cannot
// prove it holds every dependent.
func TestFencedDeclines(t *testing.T) {
	tests := []struct {
		name  string
		setup func(ix *Index, w *fakeWatch)
		q     Query
		// shards is the number of shards serving the source.
		shards int
	}{
		{
			name:  "the source is still being listed",
			setup: func(_ *Index, w *fakeWatch) { w.setState(State{Phase: PhaseSyncing, Namespaced: true}) },
			q:     fenceQuery, shards: 1,
		},
		{
			name:  "the watch of the source broke",
			setup: func(_ *Index, w *fakeWatch) { w.setState(State{Phase: PhaseSyncing, Namespaced: true, Listed: true}) },
			q:     fenceQuery, shards: 1,
		},
		{
			name:  "the version is not served",
			setup: func(_ *Index, w *fakeWatch) { w.setState(State{Phase: PhaseVersionNotServed, Namespaced: true}) },
			q:     fenceQuery, shards: 1,
		},
		{
			name: "the source is not watched",
			q: func() Query {
				q := fenceQuery
				q.Source.Resource.Version = "v2"
				return q
			}(),
			shards: 1,
		},
		{
			name: "a path of the query is not indexed",
			q: func() Query {
				q := fenceQuery
				q.Paths = []fieldpath.Reference{vpcRef, nics}
				return q
			}(),
			shards: 1,
		},
		{
			name:   "the shard that serves the cluster is not known",
			q:      fenceQuery,
			shards: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var shards []http.Handler
			var all []*versionShard
			for range tt.shards {
				s := &versionShard{rv: "100"}
				shards, all = append(shards, s), append(all, s)
			}
			ix, w, _ := fencedIndex(t, shards...)
			progressTo(t, w, "200") // the index is ahead of any fence
			if tt.setup != nil {
				tt.setup(ix, w)
			}
			fenced, err := ix.Fenced(context.Background(), tt.q, time.Now())
			if fenced || err != nil {
				t.Errorf("Fenced() = %v, %v; want false", fenced, err)
			}
			for i, s := range all {
				if r := s.requested(); len(r) != 0 {
					t.Errorf("shard %d was read: %v", i, r)
				}
			}
		})
	}
}

// The first call for a scope takes a fence (a LIST of at most one object,
// without a selector) and waits up to fenceWait for the index to pass it;
// later calls of teardowns that had begun by then reuse it, without
// waiting, however far apart they come; a teardown that begins later takes
// its own.
func TestFencedTakesAFenceAndReusesIt(t *testing.T) {
	ctx := context.Background()

	t.Run("an index already past the fence", func(t *testing.T) {
		shard := &versionShard{rv: "100"}
		ix, w, c := fencedIndex(t, shard)
		progressTo(t, w, "100")
		if fenced, err := ix.Fenced(ctx, fenceQuery, c.now()); !fenced || err != nil {
			t.Errorf("Fenced() = %v, %v; want true", fenced, err)
		}
		if r := shard.requested(); !slices.Equal(r, []string{fenceRequest}) {
			t.Errorf("requests %q, want one LIST with limit=1: %q", r, fenceRequest)
		}
	})

	t.Run("an index one version behind the fence", func(t *testing.T) {
		shard := &versionShard{rv: "100"}
		ix, w, c := fencedIndex(t, shard)
		progressTo(t, w, "99")
		if fenced, err := ix.Fenced(ctx, fenceQuery, c.now()); fenced || err != nil {
			t.Errorf("Fenced() = %v, %v; want false", fenced, err)
		}
	})

	t.Run("an index that passes the fence while the first call waits", func(t *testing.T) {
		shard := &versionShard{rv: "100"}
		ix, w, c := fencedIndex(t, shard)
		s := progressTo(t, w, "90")
		go func() {
			time.Sleep(fenceWait / 4)
			s.(cache.ResourceVersionUpdater).UpdateResourceVersion("101")
		}()
		if fenced, err := ix.Fenced(ctx, fenceQuery, c.now()); !fenced || err != nil {
			t.Errorf("Fenced() = %v, %v; want true", fenced, err)
		}
	})

	t.Run("an index that passes the fence later", func(t *testing.T) {
		shard := &versionShard{rv: "100"}
		ix, w, c := fencedIndex(t, shard)
		s := progressTo(t, w, "90")
		begun := c.now()
		call := func(step string, begun time.Time, want bool, wantWait bool, wantRequests int) {
			t.Helper()
			start := time.Now()
			fenced, err := ix.Fenced(ctx, fenceQuery, begun)
			took := time.Since(start)
			if fenced != want || err != nil {
				t.Errorf("%s: Fenced() = %v, %v; want %v", step, fenced, err, want)
			}
			if waited := took >= fenceWait; waited != wantWait {
				t.Errorf("%s: took %v, want waiting %v: %v", step, took, fenceWait, wantWait)
			}
			if r := shard.requested(); len(r) != wantRequests {
				t.Errorf("%s: requests %q, want %d fences", step, r, wantRequests)
			}
		}

		// The first item of a teardown takes a fence and waits for the
		// index, in vain; the next one reuses the fence and does not wait.
		call("first item", begun, false, true, 1)
		c.advance(time.Second)
		call("second item", begun, false, false, 1)

		// Once the index passes the fence, so do the items of the
		// teardown, without reading, however long kcp backs off between
		// them (up to a minute).
		s.(cache.ResourceVersionUpdater).UpdateResourceVersion("100")
		c.advance(20 * time.Second)
		call("item after 20 s", begun, true, false, 1)
		c.advance(time.Minute)
		call("item after another minute", begun, true, false, 1)

		// A teardown that began after the fence was taken takes its own,
		// ahead of the index again, and waits; the items of the first
		// teardown keep the fence the index passed.
		shard.set("150")
		later := c.now()
		call("first item of a later teardown", later, false, true, 2)
		call("item of the first teardown", begun, true, false, 2)
		call("second item of the later teardown", later, false, false, 2)
		s.(cache.ResourceVersionUpdater).UpdateResourceVersion("150")
		call("item of the later teardown once the index passed its fence", later, true, false, 2)

		// A relist from an older version takes the index back behind both
		// fences: neither teardown is fenced until it passes them again.
		progressTo(t, w, "95")
		call("item of the first teardown after a relist", begun, false, false, 2)
		call("item of the later teardown after a relist", later, false, false, 2)

		// Fences are forgotten fenceMemory after they were taken: an item
		// then takes a new one.
		progressTo(t, w, "200")
		c.advance(fenceMemory)
		shard.set("210")
		call("item after fenceMemory", begun, false, true, 3)
	})
}

// A fence is the scope's: another namespace, or the whole cluster for
// cluster-scoped dependents, has its own.
func TestFencesAreByScope(t *testing.T) {
	ctx := context.Background()
	shard := &versionShard{rv: "100"}
	ix, w, c := fencedIndex(t, shard)
	progressTo(t, w, "100")
	other := fenceQuery
	other.Namespace = "other"
	for _, q := range []Query{fenceQuery, other, fenceQuery, other} {
		if fenced, err := ix.Fenced(ctx, q, c.now()); !fenced || err != nil {
			t.Errorf("Fenced(%s) = %v, %v; want true", q.Namespace, fenced, err)
		}
	}
	want := []string{fenceRequest, "/clusters/c1/apis/compute.io/v1/namespaces/other/virtualmachines?limit=1"}
	if r := shard.requested(); !slices.Equal(r, want) {
		t.Errorf("requests %q, want one fence per namespace %q", r, want)
	}
	w.setState(State{Phase: PhaseSynced, Namespaced: false})
	if fenced, err := ix.Fenced(ctx, fenceQuery, c.now()); !fenced || err != nil {
		t.Errorf("Fenced() of cluster-scoped dependents = %v, %v; want true", fenced, err)
	}
	if r := shard.requested(); len(r) != 3 || r[2] != "/clusters/c1/apis/compute.io/v1/virtualmachines?limit=1" {
		t.Errorf("requests %q, want a fence of the whole cluster", r)
	}
	// Fences fenceMemory old are forgotten.
	c.advance(fenceMemory)
	if _, err := ix.Fenced(ctx, other, c.now()); err != nil {
		t.Fatal(err)
	}
	ix.lock.Lock()
	n := len(ix.fences)
	ix.lock.Unlock()
	if n != 1 {
		t.Errorf("%d fences kept, want only the one just taken", n)
	}
}

// A fence that cannot be taken is an error (the caller reads live), and is
// tried again on the next call.
func TestFencedFailsWhenTheFenceCannotBeTaken(t *testing.T) {
	ctx := context.Background()
	shard := &versionShard{rv: "100", status: http.StatusInternalServerError}
	ix, w, c := fencedIndex(t, shard)
	progressTo(t, w, "200")
	if fenced, err := ix.Fenced(ctx, fenceQuery, c.now()); fenced || err == nil {
		t.Errorf("Fenced() with a failing LIST = %v, %v; want an error", fenced, err)
	}
	shard.set("abc")
	if fenced, err := ix.Fenced(ctx, fenceQuery, c.now()); fenced || err == nil {
		t.Errorf("Fenced() with a resourceVersion that is not a number = %v, %v; want an error", fenced, err)
	}
	shard.set("100")
	if fenced, err := ix.Fenced(ctx, fenceQuery, c.now()); !fenced || err != nil {
		t.Errorf("Fenced() once the LIST succeeds = %v, %v; want true", fenced, err)
	}
	if r := shard.requested(); len(r) != 3 {
		t.Errorf("requests %q, want three: a failed fence is not kept", r)
	}
}
