package route

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index/sources"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

var (
	vms        = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
	testSource = sources.Source{Export: kcp.ObjectKey{Cluster: "provider", Name: "compute.io"}, Resource: vms}
)

// fakeWatch is the watch of a source as a Router sees it: its state, the
// store of its dependents, and the virtual workspace URLs of its export,
// the shard of a cluster first (as sources.Watch orders them).
type fakeWatch struct {
	store *store.Store

	lock        sync.Mutex
	urls        []string
	inspected   bool
	readThrough map[logicalcluster.Name]string
	// reinspections counts the calls of Reinspect.
	reinspections int
}

func (w *fakeWatch) Reinspect() {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.reinspections++
}

func (w *fakeWatch) State() sources.State {
	return sources.State{Phase: sources.PhaseSynced, Namespaced: true}
}

func (w *fakeWatch) Store() *store.Store { return w.store }

func (w *fakeWatch) Shards(cluster logicalcluster.Name) ([]string, bool) {
	w.lock.Lock()
	urls, inspected := slices.Clone(w.urls), w.inspected
	w.lock.Unlock()
	if hint, ok := w.Serving(cluster); ok {
		if i := slices.Index(urls, hint); i > 0 {
			urls[0], urls[i] = urls[i], urls[0]
		}
	}
	return urls, inspected
}

func (w *fakeWatch) Serving(cluster logicalcluster.Name) (string, bool) {
	if shard, ok := w.store.Shard(cluster); ok {
		return shard, true
	}
	w.lock.Lock()
	defer w.lock.Unlock()
	if len(w.urls) == 1 {
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

// shard serves the virtual workspace of one shard: an empty list for the
// clusters it hosts, 403 for any other cluster.
func shard(t *testing.T, clusters ...string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cluster, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/clusters/"), "/")
		if !slices.Contains(clusters, cluster) {
			status(http.StatusForbidden, "Forbidden", "", "")(w)
			return
		}
		fmt.Fprint(w, `{"items":[]}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func status(code int, reason, message string, retryAfter string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"message":%q,"code":%d}`, reason, message, code)
	}
}

// routedBy returns a router that routes testSource through w, served by
// the shards at urls, inspected or not.
func routedBy(inspected bool, urls ...string) (*Router, *fakeWatch) {
	w := &fakeWatch{store: store.New(nil), urls: urls, inspected: inspected, readThrough: map[logicalcluster.Name]string{}}
	r := New(func(src sources.Source) Watch {
		if src != testSource {
			return nil
		}
		return w
	}, vw.NewClients(&rest.Config{}), nil)
	return r, w
}

// Requests for objects of a source are routed to the shard that serves the
// workspace: once a request went through a shard, the shard is known and
// named first.
func TestRouting(t *testing.T) {
	r, w := routedBy(true, shard(t, "c1"), shard(t, "c2"))
	if _, known, err := r.Serving(testSource, "c2"); known || err != nil {
		t.Errorf("Serving(c2) before any request = %v, %v; want not known", known, err)
	}
	var tried []string
	err := r.OnShardOf(testSource, "c2", func(c *vw.Client, _ sources.State) error {
		tried = append(tried, c.URL())
		_, err := c.List(context.Background(), vw.ResourcePath(logicalcluster.NewPath("c2"), testSource.Resource, ""), nil, func([]byte) error { return nil })
		return err
	})
	if err != nil || len(tried) != 2 || tried[1] != w.urls[1] {
		t.Fatalf("OnShardOf(c2) tried %v: %v; want both shards, the second last", tried, err)
	}
	c, known, err := r.Serving(testSource, "c2")
	if err != nil || !known || c.URL() != w.urls[1] {
		t.Errorf("Serving(c2) after a request = %v, %v; want the second shard", known, err)
	}
	if u, known := r.ServingURL(testSource, "c2"); !known || u != w.urls[1] {
		t.Errorf("ServingURL(c2) after a request = %q, %v; want the second shard", u, known)
	}
	shards, err := r.Shards(testSource, "c2")
	if err != nil || len(shards) != 2 || shards[0].URL() != w.urls[1] {
		t.Errorf("Shards(c2) = %v, %v; want the second shard first", shards, err)
	}
	// A workspace no shard serves binds no export: nothing is done, and
	// the export's shards are read again (a first binding on a shard
	// adds it).
	if w.reinspections != 0 {
		t.Errorf("%d reinspections after requests that a shard served, want 0", w.reinspections)
	}
	if err := r.OnShardOf(testSource, "c3", func(c *vw.Client, _ sources.State) error {
		_, err := c.List(context.Background(), vw.ResourcePath(logicalcluster.NewPath("c3"), testSource.Resource, ""), nil, func([]byte) error { return nil })
		return err
	}); err != nil {
		t.Errorf("OnShardOf(c3) = %v", err)
	}
	if w.reinspections != 1 {
		t.Errorf("%d reinspections after a request that every shard refused, want 1", w.reinspections)
	}
	// A source that is not watched is routed nowhere.
	other := testSource
	other.Resource.Resource = "networks"
	if err := r.OnShardOf(other, "c1", func(*vw.Client, sources.State) error { return nil }); err == nil {
		t.Error("OnShardOf() of a source not watched succeeded")
	}
	// Before the export is read, nothing is routed, and that is retried.
	unread, _ := routedBy(false, shard(t, "c1"))
	if _, err := unread.Shards(testSource, ""); !errors.Is(err, ErrNotInspected) {
		t.Errorf("Shards() of an export not read yet = %v", err)
	}
	if cause, retry := RetryCause(unread.OnShardOf(testSource, "c1", func(*vw.Client, sources.State) error { return nil })); !retry || cause != CauseNotInspected {
		t.Errorf("OnShardOf() of an export not read yet: cause %q, retried %v", cause, retry)
	}
}
