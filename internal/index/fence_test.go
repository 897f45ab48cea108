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

func (s *versionShard) set(rv string, code int) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.rv, s.status = rv, code
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
			fenced, err := ix.Fenced(context.Background(), tt.q)
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
// later calls reuse it, without waiting, until it is fenceTTL old.
func TestFencedTakesAFenceAndReusesIt(t *testing.T) {
	ctx := context.Background()

	t.Run("an index already past the fence", func(t *testing.T) {
		shard := &versionShard{rv: "100"}
		ix, w, _ := fencedIndex(t, shard)
		progressTo(t, w, "100")
		if fenced, err := ix.Fenced(ctx, fenceQuery); !fenced || err != nil {
			t.Errorf("Fenced() = %v, %v; want true", fenced, err)
		}
		if r := shard.requested(); !slices.Equal(r, []string{fenceRequest}) {
			t.Errorf("requests %q, want one LIST with limit=1: %q", r, fenceRequest)
		}
	})

	t.Run("an index one version behind the fence", func(t *testing.T) {
		shard := &versionShard{rv: "100"}
		ix, w, _ := fencedIndex(t, shard)
		progressTo(t, w, "99")
		if fenced, err := ix.Fenced(ctx, fenceQuery); fenced || err != nil {
			t.Errorf("Fenced() = %v, %v; want false", fenced, err)
		}
	})

	t.Run("an index that passes the fence while the first call waits", func(t *testing.T) {
		shard := &versionShard{rv: "100"}
		ix, w, _ := fencedIndex(t, shard)
		s := progressTo(t, w, "90")
		go func() {
			time.Sleep(fenceWait / 4)
			s.(cache.ResourceVersionUpdater).UpdateResourceVersion("101")
		}()
		if fenced, err := ix.Fenced(ctx, fenceQuery); !fenced || err != nil {
			t.Errorf("Fenced() = %v, %v; want true", fenced, err)
		}
	})

	t.Run("an index that does not pass the fence", func(t *testing.T) {
		shard := &versionShard{rv: "100"}
		ix, w, c := fencedIndex(t, shard)
		s := progressTo(t, w, "90")

		// The first call waits for the index, in vain.
		start := time.Now()
		fenced, err := ix.Fenced(ctx, fenceQuery)
		if took := time.Since(start); fenced || err != nil || took < fenceWait {
			t.Errorf("first call: Fenced() = %v, %v after %v; want false after waiting %v", fenced, err, took, fenceWait)
		}
		if r := shard.requested(); !slices.Equal(r, []string{fenceRequest}) {
			t.Errorf("requests %q, want one LIST with limit=1: %q", r, fenceRequest)
		}

		// Another call within fenceTTL reuses the fence and does not wait.
		c.advance(fenceTTL / 2)
		start = time.Now()
		fenced, err = ix.Fenced(ctx, fenceQuery)
		if took := time.Since(start); fenced || err != nil || took >= fenceWait {
			t.Errorf("second call: Fenced() = %v, %v after %v; want false at once", fenced, err, took)
		}
		if r := shard.requested(); len(r) != 1 {
			t.Errorf("the second call took a new fence: %q", r)
		}

		// Once the index passes the fence, so does the next call, without
		// reading.
		s.(cache.ResourceVersionUpdater).UpdateResourceVersion("100")
		if fenced, err := ix.Fenced(ctx, fenceQuery); !fenced || err != nil {
			t.Errorf("after the index passed the fence: Fenced() = %v, %v; want true", fenced, err)
		}
		if r := shard.requested(); len(r) != 1 {
			t.Errorf("a call within fenceTTL took a new fence: %q", r)
		}

		// A fence fenceTTL old is taken anew: the new one is ahead of the
		// index again, and the first call for it waits.
		shard.set("150", 0)
		c.advance(fenceTTL / 2)
		start = time.Now()
		fenced, err = ix.Fenced(ctx, fenceQuery)
		if took := time.Since(start); fenced || err != nil || took < fenceWait {
			t.Errorf("after fenceTTL: Fenced() = %v, %v after %v; want false after waiting", fenced, err, took)
		}
		if r := shard.requested(); !slices.Equal(r, []string{fenceRequest, fenceRequest}) {
			t.Errorf("requests %q, want a second fence", r)
		}
		s.(cache.ResourceVersionUpdater).UpdateResourceVersion("150")
		if fenced, err := ix.Fenced(ctx, fenceQuery); !fenced || err != nil {
			t.Errorf("after the index passed the new fence: Fenced() = %v, %v; want true", fenced, err)
		}
		if r := shard.requested(); len(r) != 2 {
			t.Errorf("requests %q, want two fences", r)
		}
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
		if fenced, err := ix.Fenced(ctx, q); !fenced || err != nil {
			t.Errorf("Fenced(%s) = %v, %v; want true", q.Namespace, fenced, err)
		}
	}
	want := []string{fenceRequest, "/clusters/c1/apis/compute.io/v1/namespaces/other/virtualmachines?limit=1"}
	if r := shard.requested(); !slices.Equal(r, want) {
		t.Errorf("requests %q, want one fence per namespace %q", r, want)
	}
	w.setState(State{Phase: PhaseSynced, Namespaced: false})
	if fenced, err := ix.Fenced(ctx, fenceQuery); !fenced || err != nil {
		t.Errorf("Fenced() of cluster-scoped dependents = %v, %v; want true", fenced, err)
	}
	if r := shard.requested(); len(r) != 3 || r[2] != "/clusters/c1/apis/compute.io/v1/virtualmachines?limit=1" {
		t.Errorf("requests %q, want a fence of the whole cluster", r)
	}
	// Fences fenceTTL old are forgotten.
	c.advance(fenceTTL)
	if _, err := ix.Fenced(ctx, other); err != nil {
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
	ix, w, _ := fencedIndex(t, shard)
	progressTo(t, w, "200")
	if fenced, err := ix.Fenced(ctx, fenceQuery); fenced || err == nil {
		t.Errorf("Fenced() with a failing LIST = %v, %v; want an error", fenced, err)
	}
	shard.set("abc", 0)
	if fenced, err := ix.Fenced(ctx, fenceQuery); fenced || err == nil {
		t.Errorf("Fenced() with a resourceVersion that is not a number = %v, %v; want an error", fenced, err)
	}
	shard.set("100", 0)
	if fenced, err := ix.Fenced(ctx, fenceQuery); !fenced || err != nil {
		t.Errorf("Fenced() once the LIST succeeds = %v, %v; want true", fenced, err)
	}
	if r := shard.requested(); len(r) != 3 {
		t.Errorf("requests %q, want three: a failed fence is not kept", r)
	}
}
