package objects

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index/route"
)

// Reads and writes go at once to the shard known to serve the workspace,
// and find it with a read only where it is not known.
func TestWritesGoToTheShardOfTheCluster(t *testing.T) {
	const obj = `{"metadata":{"name":"vm-1","namespace":"default","uid":"u1"}}`
	serving := func(cluster string) *fakeShard {
		return &fakeShard{clusters: map[string]string{cluster: `{"items":[]}`}, objects: map[string]string{cluster + "/default/vm-1": obj}}
	}
	tests := []struct {
		name string
		// shards serve c1 if the index of the shard is in servers.
		shards  int
		servers []int
		// indexedOn, if not -1, is the shard where dependents of c1 were
		// indexed.
		indexedOn int
		// want are the methods each shard was sent, for a read and two
		// writes.
		want    [][]string
		wantErr func(error) bool
	}{
		{name: "the only shard is written at once", shards: 1, servers: []int{0}, indexedOn: -1,
			want: [][]string{{"GET", "PATCH", "DELETE"}}},
		{name: "the shard where dependents were indexed is written at once", shards: 2, servers: []int{1}, indexedOn: 1,
			want: [][]string{nil, {"GET", "PATCH", "DELETE"}}},
		{name: "an unknown shard is found with a read, once", shards: 2, servers: []int{1}, indexedOn: -1,
			want: [][]string{{"GET"}, {"GET", "PATCH", "DELETE"}}},
		{name: "a workspace no shard serves holds no object", shards: 2, indexedOn: -1,
			want: [][]string{{"GET", "GET", "GET"}, {"GET", "GET", "GET"}}, wantErr: apierrors.IsNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shards := make([]*fakeShard, tt.shards)
			for i := range shards {
				shards[i] = &fakeShard{}
				if slices.Contains(tt.servers, i) {
					shards[i] = serving("c1")
				}
			}
			c := New(newFakeRouter(t, tt.indexedOn, shards...))
			ctx := context.Background()

			raw, getErr := c.Get(ctx, testSource, "c1", "default", "vm-1")
			if getErr == nil && string(raw) != obj {
				t.Errorf("Get = %s, want %s", raw, obj)
			}
			_, patchErr := c.Patch(ctx, testSource, "c1", "default", "vm-1", types.MergePatchType, []byte(`{}`))
			errs := []error{
				getErr,
				patchErr,
				c.Delete(ctx, testSource, "c1", "default", "vm-1", metav1.DeleteOptions{}),
			}
			for _, err := range errs {
				if tt.wantErr == nil && err != nil || tt.wantErr != nil && !tt.wantErr(err) {
					t.Errorf("write: %v", err)
				}
			}
			for i, s := range shards {
				if got := s.requestMethods(); !slices.Equal(got, tt.want[i]) {
					t.Errorf("shard %d was sent %v, want %v", i, got, tt.want[i])
				}
			}
		})
	}
}

// refusing answers 403 to the first refusals requests, as kcp's virtual
// workspace does for a moment after a workspace bound the export, and then
// serves as shard does.
type refusing struct {
	shard    *fakeShard
	refusals atomic.Int32
}

func (r *refusing) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	// A wildcard request is not refused: kcp authorizes it on the grant
	// alone.
	if !strings.HasPrefix(req.URL.Path, "/clusters/*/") && r.refusals.Add(-1) >= 0 {
		status(http.StatusForbidden, "Forbidden", "")(w)
		return
	}
	r.shard.ServeHTTP(w, req)
}

// The settled reads and writes of the ledger writer take a workspace that
// every shard refuses for one that does not bind the export, and so holds
// no object, only once the refusals have lasted route.BindingSettle: until
// then they are retried (route.ErrUnbound), so that a reference to an
// object of a workspace that bound the export a moment ago is recorded.
// The Client's own reads and writes conclude at once.
func TestSettledWaitsForABinding(t *testing.T) {
	const obj = `{"metadata":{"name":"vpc-a","namespace":"default","uid":"u1"}}`
	const step = 300 * time.Millisecond
	tests := []struct {
		name string
		// refusals are the requests the serving shard refuses first; -1
		// for a shard that never serves the workspace.
		refusals int32
		// attempts bounds the retries (the request's deadline).
		attempts int
		settled  bool
		wantErr  func(error) bool
		// wantAttempts is how often the read was tried.
		wantAttempts int
	}{
		{name: "a workspace that bound the export a moment ago is read once it is served", refusals: 3, attempts: 10, settled: true,
			wantAttempts: 4},
		{name: "a workspace refused for the settle does not bind the export", refusals: -1, attempts: 10, settled: true,
			// and then the list of the export's bindings
			wantErr: apierrors.IsNotFound, wantAttempts: int(route.BindingSettle/step) + 3},
		{name: "a deadline before the settle fails, to be retried, rather than finding nothing", refusals: -1, attempts: 2, settled: true,
			wantErr: func(err error) bool { return errors.Is(err, route.ErrUnbound) && !apierrors.IsNotFound(err) }, wantAttempts: 2},
		{name: "unsettled, a refusal on every shard means no object at once", refusals: 3, attempts: 10, settled: false,
			wantErr: apierrors.IsNotFound, wantAttempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, op := range []string{"get", "patch"} {
				t.Run(op, func(t *testing.T) {
					never := &fakeShard{clusters: map[string]string{"*": `{"items":[]}`}}
					serving := &refusing{shard: &fakeShard{clusters: map[string]string{"*": `{"items":[]}`, "c1": `{"items":[]}`}, objects: map[string]string{"c1/default/vpc-a": obj}}}
					if tt.refusals < 0 {
						serving.refusals.Store(math.MaxInt32)
					} else {
						serving.refusals.Store(tt.refusals)
					}
					r := newFakeRouterOf(t, -1, never, serving)
					c := New(r)
					now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
					c.now = func() time.Time { return now }
					r.attempts, r.wait = tt.attempts, func() { now = now.Add(step) }

					err := readOrWrite(c, op, tt.settled, "c1")
					if tt.wantErr == nil && err != nil || tt.wantErr != nil && !tt.wantErr(err) {
						t.Fatalf("err = %v", err)
					}
					if got := len(never.requestMethods()); got != tt.wantAttempts {
						t.Errorf("tried %d times, want %d", got, tt.wantAttempts)
					}
				})
			}
		})
	}
}

// readOrWrite reads (op "get") or patches (op "patch") the VPC vpc-a of
// the namespace default of cluster, with c's settled reads and writes if
// settled.
func readOrWrite(c *Client, op string, settled bool, cluster logicalcluster.Name) error {
	ctx := context.Background()
	var err error
	switch {
	case op == "get" && settled:
		_, err = c.Settled().Get(ctx, testSource, cluster, "default", "vpc-a")
	case op == "get":
		_, err = c.Get(ctx, testSource, cluster, "default", "vpc-a")
	case settled:
		_, err = c.Settled().Patch(ctx, testSource, cluster, "default", "vpc-a", types.MergePatchType, []byte(`{}`))
	default:
		_, err = c.Patch(ctx, testSource, cluster, "default", "vpc-a", types.MergePatchType, []byte(`{}`))
	}
	return err
}

// notServing answers the first times requests with a 404 that names no
// object, as kcp's virtual workspace does for a resource it does not serve
// yet (its APIExport created or bound a moment ago), and then serves as
// shard does.
type notServing struct {
	shard *fakeShard
	times atomic.Int32
}

func (n *notServing) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if n.times.Add(-1) >= 0 {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "404 page not found")
		return
	}
	n.shard.ServeHTTP(w, req)
}

// A 404 that names no object says nothing about the object: reads and
// writes retry it, and never take it for "no such object".
func TestNotFoundThatNamesNoObjectIsRetried(t *testing.T) {
	const obj = `{"metadata":{"name":"vpc-a","namespace":"default","uid":"u1"}}`
	tests := []struct {
		name    string
		times   int32
		wantErr func(error) bool
	}{
		{name: "served after a moment", times: 2},
		{name: "never served: an error to retry, not a missing object", times: math.MaxInt32,
			wantErr: func(err error) bool { return errors.Is(err, route.ErrUnbound) && !apierrors.IsNotFound(err) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, known := range []bool{true, false} {
				shard := &notServing{shard: &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}, objects: map[string]string{"c1/default/vpc-a": obj}}}
				shard.times.Store(tt.times)
				shards := []http.Handler{shard}
				if !known {
					shards = append(shards, &fakeShard{}) // two shards: the one serving c1 is found with a read
				}
				r := newFakeRouterOf(t, -1, shards...)
				r.attempts, r.wait = 5, func() {}
				c := New(r)
				_, getErr := c.Settled().Get(context.Background(), testSource, "c1", "default", "vpc-a")
				_, patchErr := c.Patch(context.Background(), testSource, "c1", "default", "vpc-a", types.MergePatchType, []byte(`{}`))
				for _, err := range []error{getErr, patchErr} {
					if tt.wantErr == nil && err != nil || tt.wantErr != nil && !tt.wantErr(err) {
						t.Errorf("known shard %v: err = %v", known, err)
					}
				}
			}
		})
	}
}

// binding is an APIBinding of the export of testSource in cluster, as the
// virtual workspace lists it.
func binding(cluster string) string {
	return fmt.Sprintf(`{"metadata":{"name":"compute","annotations":{"kcp.io/cluster":%q}},"spec":{"reference":{"export":{"path":"provider","name":%q}}}}`, cluster, testSource.Export.Name)
}

// kcp's virtual workspace refuses (403) alike a workspace that does not
// bind the export and a webhook that the provider has not granted what it
// asks for. Once the bindings have settled, the settled reads and writes
// tell the two apart from the export's bindings, which a wildcard LIST
// reads on the grant alone: a workspace that binds no export holds no
// object (NotFound, a reference to it is missing), one that binds it is
// refused by the provider (Forbidden, and the write that adds the
// reference is refused), as is a webhook that may not list the bindings.
// With one shard, which the router knows to serve every workspace, the
// Client's own reads and writes return its 403 at once.
func TestSettledTellsAMissingGrantFromAWorkspaceThatBindsNoExport(t *testing.T) {
	const obj = `{"metadata":{"name":"vpc-a","namespace":"default","uid":"u1"}}`
	list := func(items ...string) string { return `{"items":[` + strings.Join(items, ",") + `]}` }
	tests := []struct {
		name string
		// shards are the wildcard lists of bindings of each shard ("" if
		// refused); every shard refuses the objects of c2, and serves
		// those of c1.
		shards   []string
		settled  bool
		wantErr  func(error) bool
		wantList bool
	}{
		{name: "one shard, a workspace that binds no export", shards: []string{list(binding("c1"))}, settled: true,
			wantErr: apierrors.IsNotFound, wantList: true},
		{name: "one shard, a workspace that binds the export: the grant", shards: []string{list(binding("c1"), binding("c2"))}, settled: true,
			wantErr: apierrors.IsForbidden, wantList: true},
		{name: "one shard, the bindings may not be listed: the grant", shards: []string{""}, settled: true,
			wantErr: apierrors.IsForbidden, wantList: true},
		{name: "two shards, the workspace binds the export on the second", shards: []string{list(binding("c1")), list(binding("c2"))}, settled: true,
			wantErr: apierrors.IsForbidden, wantList: true},
		{name: "two shards, a workspace that binds no export", shards: []string{list(binding("c1")), list()}, settled: true,
			wantErr: apierrors.IsNotFound, wantList: true},
		{name: "a binding of another export with the name of the workspace's", shards: []string{list(strings.Replace(binding("c2"), testSource.Export.Name, "other.io", 1))}, settled: true,
			wantErr: apierrors.IsNotFound, wantList: true},
		{name: "unsettled, one shard: its 403 at once", shards: []string{list(binding("c2"))},
			wantErr: apierrors.IsForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, op := range []string{"get", "patch"} {
				t.Run(op, func(t *testing.T) {
					var shards []*fakeShard
					for _, bindings := range tt.shards {
						clusters := map[string]string{"c1": list()}
						if bindings != "" {
							clusters["*"] = bindings
						}
						shards = append(shards, &fakeShard{clusters: clusters, objects: map[string]string{"c1/default/vpc-a": obj}})
					}
					r := newFakeRouter(t, -1, shards...)
					c := New(r)
					now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
					c.now = func() time.Time { return now }
					r.attempts, r.wait = 100, func() { now = now.Add(100 * time.Millisecond) }

					err := readOrWrite(c, op, tt.settled, "c2")
					if !tt.wantErr(err) {
						t.Fatalf("err = %v", err)
					}
					listed := false
					for _, s := range shards {
						for _, req := range s.requested() {
							listed = listed || strings.HasPrefix(req, "/clusters/*/apis/apis.kcp.io/v1alpha2/apibindings")
						}
					}
					if listed != tt.wantList {
						t.Errorf("listed the bindings: %v, want %v", listed, tt.wantList)
					}
				})
			}
		})
	}
}

// A workspace that binds the export and holds the object is written at
// once on the one shard there is: no bindings are read.
func TestSettledWritesAtOnceWhereServed(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}, objects: map[string]string{"c1/default/vpc-a": `{"metadata":{"name":"vpc-a"}}`}}
	c := New(newFakeRouter(t, -1, shard))
	if _, err := c.Settled().Patch(context.Background(), testSource, "c1", "default", "vpc-a", types.MergePatchType, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if got := shard.requestMethods(); !slices.Equal(got, []string{http.MethodPatch}) {
		t.Errorf("requests %v, want one PATCH", got)
	}
}

// A LIST of an export's bindings answers the refused reads and writes of
// bindingsTTL, so that the writes of a workspace that binds no export of
// the type their references name do not each read every binding.
func TestBindingsAreListedOncePerTTL(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{"*": `{"items":[` + binding("c1") + `]}`, "c1": `{"items":[]}`}}
	r := newFakeRouter(t, -1, shard)
	c := New(r)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	r.attempts, r.wait = 100, func() { now = now.Add(100 * time.Millisecond) }
	lists := func() int {
		n := 0
		for _, req := range shard.requested() {
			if strings.HasPrefix(req, "/clusters/*/apis/apis.kcp.io/v1alpha2/apibindings") {
				n++
			}
		}
		return n
	}
	for i := range 3 {
		if err := readOrWrite(c, "patch", true, "c2"); !apierrors.IsNotFound(err) {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if got := lists(); got != 1 {
		t.Errorf("%d LISTs of the bindings for three writes within %s, want 1", got, bindingsTTL)
	}
	now = now.Add(bindingsTTL)
	if err := readOrWrite(c, "get", true, "c2"); !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if got := lists(); got != 2 {
		t.Errorf("%d LISTs of the bindings once %s passed, want 2", got, bindingsTTL)
	}
}
