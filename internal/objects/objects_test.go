package objects

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/index/route"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

var testSource = index.Source{
	Export:   kcp.ObjectKey{Cluster: "provider", Name: "compute.io"},
	Resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"},
}

// fakeShard serves the virtual workspace of one shard: the objects of the
// clusters it hosts, 403 for any other cluster. A POST (an Event) is
// answered with the status in created, or 201.
type fakeShard struct {
	clusters map[string]string // cluster -> list body
	objects  map[string]string // cluster/namespace/name -> object body
	created  func(w http.ResponseWriter)

	lock     sync.Mutex
	requests []string
	// methods are the methods of the requests, in order.
	methods []string
}

func (s *fakeShard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.lock.Lock()
	s.requests = append(s.requests, r.URL.Path+"?"+r.URL.RawQuery)
	s.methods = append(s.methods, r.Method)
	s.lock.Unlock()
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/clusters/"), "/")
	list, ok := s.clusters[parts[0]]
	if !ok {
		status(http.StatusForbidden, "Forbidden", "")(w)
		return
	}
	if r.Method == http.MethodPost {
		if s.created != nil {
			s.created(w)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"kind":"Event","apiVersion":"v1"}`)
		return
	}
	// /clusters/<c>/apis/<g>/<v>/namespaces/<ns>/<resource>[/<name>] or
	// /clusters/<c>/apis/<g>/<v>/<resource>[/<name>]
	name := ""
	switch {
	case len(parts) == 8:
		name = parts[0] + "/" + parts[5] + "/" + parts[7]
	case len(parts) == 6 && parts[4] != "namespaces":
		name = parts[0] + "//" + parts[5]
	}
	if name != "" {
		if obj, ok := s.objects[name]; ok {
			fmt.Fprint(w, obj)
			return
		}
		// As kcp answers for a missing object: a 404 that names it.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"details":{"name":%q,"kind":%q}}`, parts[len(parts)-1], parts[len(parts)-2])
		return
	}
	fmt.Fprint(w, list)
}

func (s *fakeShard) requested() []string {
	s.lock.Lock()
	defer s.lock.Unlock()
	return slices.Clone(s.requests)
}

func (s *fakeShard) requestMethods() []string {
	s.lock.Lock()
	defer s.lock.Unlock()
	return slices.Clone(s.methods)
}

// status answers with a Status of code, with causes (as JSON) if set.
func status(code int, reason, causes string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		details := ""
		if causes != "" {
			details = fmt.Sprintf(`,"details":{"causes":%s}`, causes)
		}
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":%q,"code":%d%s}`, reason, code, details)
	}
}

// fakeRouter routes as the index does (see route.Router.OnShardOf): to the
// shard known to serve a cluster, the only shard there is or the one the
// cluster was seen on, or else to each shard in turn while it answers 403,
// remembering the one that did not. Requests are tried once unless
// attempts says otherwise.
type fakeRouter struct {
	shards []*vw.Client
	// inspected is unset while the APIExport has not been read.
	inspected bool

	// attempts, if above 1, is how often Retry tries an attempt that fails
	// for a reason that clears by itself (see route.RetryCause), calling
	// wait between attempts.
	attempts int
	wait     func()

	lock  sync.Mutex
	known map[logicalcluster.Name]*vw.Client
	// readThrough is what ReadThrough recorded: cluster -> shard URL.
	readThrough map[logicalcluster.Name]string
}

// newFakeRouter returns a router over the given shards, which knows that
// cluster c1 lives on shard indexedOn unless it is -1.
func newFakeRouter(t *testing.T, indexedOn int, shards ...*fakeShard) *fakeRouter {
	t.Helper()
	handlers := make([]http.Handler, len(shards))
	for i, s := range shards {
		handlers[i] = s
	}
	return newFakeRouterOf(t, indexedOn, handlers...)
}

// newFakeRouterOf is newFakeRouter over shards that any handler serves.
func newFakeRouterOf(t *testing.T, indexedOn int, shards ...http.Handler) *fakeRouter {
	t.Helper()
	r := &fakeRouter{inspected: true, known: map[logicalcluster.Name]*vw.Client{}}
	for _, s := range shards {
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		c, err := vw.NewClient(&rest.Config{}, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		r.shards = append(r.shards, c)
	}
	if indexedOn >= 0 {
		r.known["c1"] = r.shards[indexedOn]
	}
	return r
}

func (r *fakeRouter) Serving(_ index.Source, cluster logicalcluster.Name) (*vw.Client, bool, error) {
	r.lock.Lock()
	defer r.lock.Unlock()
	if len(r.shards) == 1 {
		return r.shards[0], true, nil
	}
	c, ok := r.known[cluster]
	return c, ok, nil
}

func (r *fakeRouter) Shards(src index.Source, cluster logicalcluster.Name) ([]*vw.Client, error) {
	if !r.inspected {
		return nil, fmt.Errorf("%s: %w", src, route.ErrNotInspected)
	}
	shards := slices.Clone(r.shards)
	if c, ok, _ := r.Serving(src, cluster); ok {
		if i := slices.Index(shards, c); i > 0 {
			shards[0], shards[i] = shards[i], shards[0]
		}
	}
	return shards, nil
}

func (r *fakeRouter) OnShardOf(src index.Source, cluster logicalcluster.Name, do func(*vw.Client, index.State) error) error {
	shards, err := r.Shards(src, cluster)
	if err != nil {
		return err
	}
	for _, c := range shards {
		err := do(c, index.State{Phase: index.PhaseSynced, Namespaced: true})
		if apierrors.IsForbidden(err) {
			continue
		}
		if err == nil {
			r.lock.Lock()
			r.known[cluster] = c
			r.lock.Unlock()
		}
		return err
	}
	return nil
}

func (r *fakeRouter) ReadThrough(_ index.Source, cluster logicalcluster.Name, url string) {
	r.lock.Lock()
	defer r.lock.Unlock()
	if r.readThrough == nil {
		r.readThrough = map[logicalcluster.Name]string{}
	}
	r.readThrough[cluster] = url
}

func (r *fakeRouter) Retry(_ context.Context, attempt func() error) error {
	for i := 1; ; i++ {
		err := attempt()
		if _, retryable := route.RetryCause(err); !retryable || i >= r.attempts {
			return err
		}
		r.wait()
	}
}

// Lists visit every object of every shard once, by label, and fail while
// the APIExport has not been read.
func TestList(t *testing.T) {
	shard1 := &fakeShard{clusters: map[string]string{"*": `{"items":[{"metadata":{"name":"vm-1","namespace":"default","annotations":{"kcp.io/cluster":"c1"}}}]}`}}
	shard2 := &fakeShard{clusters: map[string]string{"*": `{"items":[{"metadata":{"name":"vm-2","namespace":"default","annotations":{"kcp.io/cluster":"c2"}}}]}`}}
	r := newFakeRouter(t, -1, shard1, shard2)
	c := New(r)
	var got []string
	err := c.List(context.Background(), testSource, "stale", func(m kcp.Meta) error {
		got = append(got, m.Cluster.String()+"/"+m.Name)
		return nil
	})
	if want := []string{"c1/vm-1", "c2/vm-2"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("List() visited %v, %v; want %v", got, err, want)
	}
	for _, s := range []*fakeShard{shard1, shard2} {
		if req := s.requested(); len(req) != 1 || req[0] != "/clusters/*/apis/compute.io/v1/virtualmachines?labelSelector=stale&limit=500" {
			t.Errorf("requests = %q", req)
		}
	}
	// The router learns which shard serves each workspace listed.
	if want := map[logicalcluster.Name]string{"c1": r.shards[0].URL(), "c2": r.shards[1].URL()}; !maps.Equal(r.readThrough, want) {
		t.Errorf("read through %v, want %v", r.readThrough, want)
	}
	r.inspected = false
	if err := c.List(context.Background(), testSource, "", func(kcp.Meta) error { return nil }); !errors.Is(err, route.ErrNotInspected) {
		t.Errorf("List() before the export was read: %v", err)
	}
}

// A workspace's objects are listed through the shard that serves it,
// found as the router finds it; a workspace no shard serves has none.
func TestListObjectsIn(t *testing.T) {
	vm := func(cluster, name string) string {
		return fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default","annotations":{"kcp.io/cluster":%q}}}`, name, cluster)
	}
	shard1 := &fakeShard{clusters: map[string]string{"c2": `{"items":[` + vm("c2", "vm-2") + `]}`}}
	shard2 := &fakeShard{clusters: map[string]string{"c1": `{"items":[` + vm("c1", "vm-1") + `,` + vm("c1", "vm-3") + `]}`}}
	r := newFakeRouter(t, -1, shard1, shard2)
	c := New(r)
	var got []string
	err := c.ListObjectsIn(context.Background(), testSource, "c1", "stale", func(m kcp.Meta, _ []byte) bool {
		return m.Name == "vm-3"
	}, func(m kcp.Meta, raw []byte) error {
		got = append(got, fmt.Sprintf("%s/%s kept=%v", m.Cluster, m.Name, raw != nil))
		return nil
	})
	if want := []string{"c1/vm-1 kept=false", "c1/vm-3 kept=true"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ListObjectsIn(c1) visited %v, %v; want %v", got, err, want)
	}
	want := "/clusters/c1/apis/compute.io/v1/virtualmachines?labelSelector=stale&limit=500"
	if req := shard1.requested(); !slices.Equal(req, []string{want}) {
		t.Errorf("shard 1 was asked %q, want %q (answered 403)", req, want)
	}
	if req := shard2.requested(); !slices.Equal(req, []string{want}) {
		t.Errorf("shard 2 was asked %q, want %q", req, want)
	}
	if r.readThrough["c1"] != r.shards[1].URL() {
		t.Errorf("read through %v, want c1 on shard 2", r.readThrough)
	}
	got = nil
	if err := c.ListObjectsIn(context.Background(), testSource, "c3", "", nil, func(m kcp.Meta, _ []byte) error {
		got = append(got, m.Name)
		return nil
	}); err != nil || len(got) != 0 {
		t.Errorf("ListObjectsIn(c3), which no shard serves, visited %v, %v", got, err)
	}
}

// pagedShard serves a wildcard list of n objects in pages of the limit
// asked for; the continue token is the index of the next object. The
// pages in expire answer 410 Expired instead, once each.
type pagedShard struct {
	n      int
	expire map[string]bool

	lock     sync.Mutex
	requests []string
}

func (s *pagedShard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.lock.Lock()
	s.requests = append(s.requests, q.Get("continue"))
	expired := s.expire[q.Get("continue")]
	delete(s.expire, q.Get("continue"))
	s.lock.Unlock()
	if expired {
		status(http.StatusGone, "Expired", "")(w)
		return
	}
	from, _ := strconv.Atoi(cmp.Or(q.Get("continue"), "0"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	to := min(s.n, from+limit)
	next := ""
	if to < s.n {
		next = strconv.Itoa(to)
	}
	items := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		items = append(items, fmt.Sprintf(`{"metadata":{"name":"vm-%04d","namespace":"default","annotations":{"kcp.io/cluster":"c1"}}}`, i))
	}
	fmt.Fprintf(w, `{"metadata":{"resourceVersion":"10","continue":%q},"items":[%s]}`, next, strings.Join(items, ","))
}

// routerTo returns a router over one shard that h serves.
func routerTo(t *testing.T, h http.Handler) *fakeRouter {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := vw.NewClient(&rest.Config{}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeRouter{inspected: true, known: map[logicalcluster.Name]*vw.Client{}, shards: []*vw.Client{c}}
}

// A shard's list is read in pages of listPage objects; a page whose
// continue token expired starts the list again, and what the pages before
// it read is visited once, after the last page.
func TestListPages(t *testing.T) {
	tests := []struct {
		name   string
		expire []string
		// want are the continue tokens of the pages asked for.
		want    []string
		wantErr bool
	}{
		{name: "three pages", want: []string{"", "500", "1000"}},
		{name: "the second page expired", expire: []string{"500"}, want: []string{"", "500", "", "500", "1000"}},
		{name: "the third page expired", expire: []string{"1000"}, want: []string{"", "500", "1000", "", "500", "1000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shard := &pagedShard{n: 2*listPage + 7, expire: map[string]bool{}}
			for _, e := range tt.expire {
				shard.expire[e] = true
			}
			c := New(routerTo(t, shard))
			seen := map[string]int{}
			kept := 0
			err := c.ListObjects(context.Background(), testSource, "", func(m kcp.Meta, _ []byte) bool {
				return m.Name == "vm-0003"
			}, func(m kcp.Meta, raw []byte) error {
				seen[m.Name]++
				if raw != nil {
					kept++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) != shard.n {
				t.Errorf("visited %d objects, want %d", len(seen), shard.n)
			}
			for name, n := range seen {
				if n != 1 {
					t.Errorf("%s visited %d times", name, n)
				}
			}
			if kept != 1 {
				t.Errorf("%d objects came with their JSON, want the one kept", kept)
			}
			if !slices.Equal(shard.requests, tt.want) {
				t.Errorf("pages asked for %q, want %q", shard.requests, tt.want)
			}
		})
	}

	t.Run("pages that keep expiring fail the listing", func(t *testing.T) {
		shard := &pagedShard{n: 2 * listPage, expire: map[string]bool{}}
		r := routerTo(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			shard.lock.Lock()
			shard.expire["500"] = true
			shard.lock.Unlock()
			shard.ServeHTTP(w, r)
		}))
		visited := 0
		err := New(r).List(context.Background(), testSource, "", func(kcp.Meta) error { visited++; return nil })
		if !apierrors.IsResourceExpired(err) {
			t.Errorf("List() = %v, want the expiry", err)
		}
		if visited != 0 || len(shard.requests) != 2*(listRestarts+1) {
			t.Errorf("visited %d objects in %d pages, want none in %d", visited, len(shard.requests), 2*(listRestarts+1))
		}
	})
}

// Whether a namespace is being deleted is asked with a dry-run Event on the
// shard that serves the workspace, and remembered.
func TestNamespaceTerminating(t *testing.T) {
	terminating := status(http.StatusForbidden, "Forbidden", `[{"reason":"NamespaceTerminating","message":"namespace is being terminated"}]`)
	shard1 := &fakeShard{}
	shard2 := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}, created: terminating}
	c := New(newFakeRouter(t, -1, shard1, shard2))
	for range 2 {
		got, err := c.NamespaceTerminating(context.Background(), testSource, "c1", "default")
		if err != nil || !got {
			t.Errorf("NamespaceTerminating() = %v, %v; want true", got, err)
		}
	}
	if req := shard2.requested(); len(req) != 1 || req[0] != "/clusters/c1/api/v1/namespaces/default/events?dryRun=All" {
		t.Errorf("requests = %q, want one dry-run Event", req)
	}
	// A workspace no shard serves cannot tell.
	if got, err := c.NamespaceTerminating(context.Background(), testSource, "c2", "default"); err == nil || got {
		t.Errorf("NamespaceTerminating() of a workspace no shard serves = %v, %v", got, err)
	}
}

// An answer is asked again once it expired, whether or not it was
// forgotten yet: a namespace found active after 2s, one found being
// deleted after 10 minutes.
func TestNamespaceTerminatingExpires(t *testing.T) {
	terminating := status(http.StatusForbidden, "Forbidden", `[{"reason":"NamespaceTerminating","message":"namespace is being terminated"}]`)
	shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}}
	c := New(newFakeRouter(t, -1, shard))
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	ctx := context.Background()
	asks := func(step string, want int) {
		t.Helper()
		if got := len(shard.requested()); got != want {
			t.Errorf("%s: %d dry-run Events, want %d", step, got, want)
		}
	}
	ask := func(namespace string) bool {
		t.Helper()
		terminating, err := c.NamespaceTerminating(ctx, testSource, "c1", namespace)
		if err != nil {
			t.Fatalf("NamespaceTerminating(%s): %v", namespace, err)
		}
		return terminating
	}
	ask("active")
	shard.created = terminating
	ask("doomed")
	asks("asked", 2)
	now = now.Add(time.Second)
	ask("active")
	ask("doomed")
	asks("remembered", 2)
	now = now.Add(notTerminatingTTL)
	ask("active")
	ask("doomed")
	asks("an active namespace expired", 3)
	now = now.Add(terminatingTTL - notTerminatingTTL - 2*time.Second) // a second before it expires
	if !ask("doomed") {
		t.Errorf("a namespace being deleted was forgotten within %s", terminatingTTL)
	}
	asks("a namespace being deleted, remembered", 3)
	now = now.Add(time.Second)
	ask("doomed")
	asks("a namespace being deleted expired", 4)
}

// A namespace found active before and gone now was deleted since: kcp
// deletes a workspace's namespace default only with the workspace. One
// never found active, or a 404 about something else, tells nothing.
func TestNamespaceGoneAfterItWasSeen(t *testing.T) {
	notFound := func(kind, name string) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"details":{"name":%q,"kind":%q}}`, name, kind)
		}
	}
	tests := []struct {
		name            string
		seen            bool
		gone            func(w http.ResponseWriter)
		wantTerminating bool
	}{
		{name: "seen, then gone", seen: true, gone: notFound("namespaces", "default"), wantTerminating: true},
		{name: "never seen, gone", gone: notFound("namespaces", "default")},
		{name: "seen, then another namespace's 404", seen: true, gone: notFound("namespaces", "other")},
		{name: "seen, then a 404 about events", seen: true, gone: notFound("events", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}}
			c := New(newFakeRouter(t, -1, shard))
			now := time.Unix(1000, 0)
			c.now = func() time.Time { return now }
			ctx := context.Background()
			if tt.seen {
				if got, err := c.NamespaceTerminating(ctx, testSource, "c1", "default"); err != nil || got {
					t.Fatalf("NamespaceTerminating() of an active namespace = %v, %v", got, err)
				}
			}
			now = now.Add(time.Hour)
			shard.created = tt.gone
			got, err := c.NamespaceTerminating(ctx, testSource, "c1", "default")
			if got != tt.wantTerminating || (err == nil) != tt.wantTerminating {
				t.Errorf("NamespaceTerminating() = %v, %v; want %v and an error unless it is", got, err, tt.wantTerminating)
			}
		})
	}
}

// A SubjectAccessReview is asked on the shard that serves the workspace;
// when every shard refuses it (no claim, no grant), ReviewAccess says so.
func TestReviewAccess(t *testing.T) {
	answer := func(allowed bool) func(w http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","status":{"allowed":%v,"reason":"RBAC"}}`, allowed)
		}
	}
	shard1 := &fakeShard{}
	shard2 := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}, created: answer(true)}
	c := New(newFakeRouter(t, -1, shard1, shard2))
	spec := authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Group: "compute.io", Resource: "virtualmachines", Name: "vm-1", Namespace: "default"}}
	got, err := c.ReviewAccess(context.Background(), testSource, "c1", spec)
	if err != nil || !got.Allowed || got.Reason != "RBAC" {
		t.Errorf("ReviewAccess() = %+v, %v; want allowed", got, err)
	}
	if req := shard2.requested(); len(req) != 1 || req[0] != "/clusters/c1/apis/authorization.k8s.io/v1/subjectaccessreviews?" {
		t.Errorf("requests = %q, want one SubjectAccessReview", req)
	}
	shard2.created = answer(false)
	if got, err := c.ReviewAccess(context.Background(), testSource, "c1", spec); err != nil || got.Allowed {
		t.Errorf("ReviewAccess() = %+v, %v; want denied", got, err)
	}
	// A workspace every shard refuses: the claim is missing.
	if _, err := c.ReviewAccess(context.Background(), testSource, "c2", spec); !errors.Is(err, ErrNoAccessReview) || !strings.Contains(err.Error(), "claim subjectaccessreviews") {
		t.Errorf("ReviewAccess() of a workspace every shard refuses: %v", err)
	}
}

// A review of a source whose APIExport the webhook cannot read is one kcp
// will not answer.
func TestReviewAccessWithoutTheExport(t *testing.T) {
	r := newFakeRouter(t, -1, &fakeShard{})
	r.inspected = false
	spec := authorizationv1.SubjectAccessReviewSpec{User: "alice", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete"}}
	if _, err := New(r).ReviewAccess(context.Background(), testSource, "c1", spec); !errors.Is(err, ErrNoAccessReview) || !strings.Contains(err.Error(), "apiexportendpointslices") {
		t.Errorf("ReviewAccess() = %v", err)
	}
}

// Callers that ask about one namespace at once share one dry-run Event,
// and one that gives up while waiting ends no other's wait.
func TestNamespaceProbesShared(t *testing.T) {
	release := make(chan struct{})
	shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}, created: func(w http.ResponseWriter) {
		<-release
		status(http.StatusForbidden, "Forbidden", `[{"reason":"NamespaceTerminating","message":"namespace is being terminated"}]`)(w)
	}}
	c := New(newFakeRouter(t, -1, shard))
	const callers = 8
	var clock atomic.Int32
	c.now = func() time.Time {
		clock.Add(1)
		return time.Now()
	}
	gaveUp, giveUp := context.WithCancel(context.Background())
	results := make(chan error, callers+1)
	for i := range callers + 1 {
		ctx := context.Background()
		if i == 0 {
			ctx = gaveUp
		}
		go func() {
			terminating, err := c.NamespaceTerminating(ctx, testSource, "c1", "doomed")
			if err == nil && !terminating {
				err = errors.New("not terminating")
			}
			results <- err
		}()
	}
	// Every caller has looked for a remembered answer (one look at the
	// clock each), and the probe (one more) waits for release.
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return clock.Load() == callers+2 && len(shard.requested()) == 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	giveUp()
	if err := <-results; !errors.Is(err, context.Canceled) {
		t.Errorf("the caller that gave up got %v, want context.Canceled", err)
	}
	close(release)
	for range callers {
		if err := <-results; err != nil {
			t.Errorf("NamespaceTerminating() of a namespace being deleted: %v", err)
		}
	}
	if got := shard.requested(); len(got) != 1 {
		t.Errorf("%d dry-run Events for %d callers at once, want 1: %v", len(got), callers+1, got)
	}
}
