package objects

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
	if r.refusals.Add(-1) >= 0 {
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
			wantErr: apierrors.IsNotFound, wantAttempts: int(route.BindingSettle/step) + 2},
		{name: "a deadline before the settle fails, to be retried, rather than finding nothing", refusals: -1, attempts: 2, settled: true,
			wantErr: func(err error) bool { return errors.Is(err, route.ErrUnbound) && !apierrors.IsNotFound(err) }, wantAttempts: 2},
		{name: "unsettled, a refusal on every shard means no object at once", refusals: 3, attempts: 10, settled: false,
			wantErr: apierrors.IsNotFound, wantAttempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, op := range []string{"get", "patch"} {
				t.Run(op, func(t *testing.T) {
					never := &fakeShard{}
					serving := &refusing{shard: &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}, objects: map[string]string{"c1/default/vpc-a": obj}}}
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

					var err error
					switch {
					case op == "get" && tt.settled:
						_, err = c.Settled().Get(context.Background(), testSource, "c1", "default", "vpc-a")
					case op == "get":
						_, err = c.Get(context.Background(), testSource, "c1", "default", "vpc-a")
					case tt.settled:
						_, err = c.Settled().Patch(context.Background(), testSource, "c1", "default", "vpc-a", types.MergePatchType, []byte(`{}`))
					default:
						_, err = c.Patch(context.Background(), testSource, "c1", "default", "vpc-a", types.MergePatchType, []byte(`{}`))
					}
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
