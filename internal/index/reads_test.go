package index

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index/route"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// fakeShard serves the virtual workspace of one shard: the objects of the
// clusters it hosts, 403 for any other cluster.
type fakeShard struct {
	clusters map[string]string // cluster -> list body
	objects  map[string]string // cluster/namespace/name -> object body
	// paged are the items of a cluster's lists served in pages, as limit
	// and continue (an offset here) ask, instead of its list body.
	paged    map[string][]string
	lock     sync.Mutex
	requests []string
	// failures answer the next requests, one each.
	failures []func(w http.ResponseWriter)
}

func (s *fakeShard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.lock.Lock()
	s.requests = append(s.requests, r.URL.Path+"?"+r.URL.RawQuery)
	var fail func(w http.ResponseWriter)
	if len(s.failures) > 0 {
		fail, s.failures = s.failures[0], s.failures[1:]
	}
	s.lock.Unlock()
	if fail != nil {
		fail(w)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/clusters/"), "/")
	list, ok := s.clusters[parts[0]]
	if !ok {
		status(http.StatusForbidden, "Forbidden", "", "")(w)
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
	if items, ok := s.paged[parts[0]]; ok {
		from, _ := strconv.Atoi(r.URL.Query().Get("continue"))
		to := len(items)
		if limit, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && from+limit < to {
			to = from + limit
		}
		next := ""
		if to < len(items) {
			next = strconv.Itoa(to)
		}
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"9","continue":%q},"items":[%s]}`, next, strings.Join(items[from:to], ","))
		return
	}
	fmt.Fprint(w, list)
}

// failNext makes the next requests fail, one with each of failures.
func (s *fakeShard) failNext(failures ...func(w http.ResponseWriter)) {
	s.lock.Lock()
	defer s.lock.Unlock()
	s.failures = append(s.failures, failures...)
}

func (s *fakeShard) requested() []string {
	s.lock.Lock()
	defer s.lock.Unlock()
	return slices.Clone(s.requests)
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

// routedIndex returns an index whose source testSource (namespaced) is
// served by the given shards, inspected or not, and the watch of it.
func routedIndex(t testing.TB, inspected bool, opts Options, shards ...*fakeShard) (*Index, *fakeWatch) {
	t.Helper()
	w := newFakeWatch(State{Phase: PhaseSynced, Namespaced: true}, vpcRef)
	w.inspected = inspected
	w.someShards = len(opts.Shards) > 0
	for _, s := range shards {
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		w.urls = append(w.urls, srv.URL)
	}
	return newTestIndex(t, w, opts), w
}

func TestConfirmAndLookupFindTheShardOfTheCluster(t *testing.T) {
	shard1 := &fakeShard{clusters: map[string]string{"c1": `{"items":[{"metadata":{"name":"vm-1"}}]}`}}
	shard2 := &fakeShard{
		clusters: map[string]string{"c2": `{"items":[{"metadata":{"name":"vm-2","namespace":"default","uid":"u2"},"spec":{"vpcRef":{"name":"vpc-a"}}}]}`},
		objects: map[string]string{
			"c2/default/vpc-a": `{"metadata":{"name":"vpc-a","namespace":"default","uid":"v1","deletionTimestamp":"2026-01-01T00:00:00Z","annotations":{"kcp.io/cluster":"c2"}}}`,
			"c2//gateway":      `{"metadata":{"name":"gateway","uid":"g1"}}`,
		},
	}
	ix, w := routedIndex(t, true, Options{}, shard1, shard2)
	ctx := context.Background()

	seen, scanned, err := confirm(ctx, ix, testSource, []fieldpath.Reference{vpcRef}, "c2", "default", "vpc-a")
	if want := []kcp.Meta{{Cluster: "c2", Namespace: "default", Name: "vm-2", UID: "u2"}}; err != nil || scanned != 1 || !reflect.DeepEqual(seen, want) {
		t.Fatalf("Confirm(c2) = %v, %d, %v; want vm-2 from the second shard", seen, scanned, err)
	}
	if r1, r2 := shard1.requested(), shard2.requested(); len(r1) != 1 || len(r2) != 1 {
		t.Errorf("requests: shard 1 %v, shard 2 %v", r1, r2)
	}
	if got := w.readThroughOf("c2"); got != w.urls[1] {
		t.Errorf("c2 was read through %q, recorded %q", w.urls[1], got)
	}
	// The shard that served c2 is asked first from now on.
	if _, err := ix.Lookup(ctx, testSource, "c2", "default", "vpc-a"); err != nil {
		t.Fatal(err)
	}
	if r1 := shard1.requested(); len(r1) != 1 {
		t.Errorf("the first shard was asked again: %v", r1)
	}

	found, err := ix.Lookup(ctx, testSource, "c2", "default", "vpc-a")
	if want := []kcp.Meta{{Cluster: "c2", Namespace: "default", Name: "vpc-a", UID: "v1", Terminating: true}}; err != nil || !reflect.DeepEqual(found, want) {
		t.Errorf("Lookup(vpc-a) = %+v, %v; want %+v", found, err, want)
	}
	if found, err := ix.Lookup(ctx, testSource, "c2", "default", "missing"); err != nil || len(found) != 0 {
		t.Errorf("Lookup(missing) = %+v, %v; want nothing", found, err)
	}
	// A namespaced target of a cluster-scoped dependent is looked for by
	// name in every namespace.
	if _, err := ix.Lookup(ctx, testSource, "c2", "", "vpc-a"); err != nil {
		t.Fatal(err)
	}
	r2 := shard2.requested()
	if last := r2[len(r2)-1]; !strings.Contains(last, "fieldSelector=metadata.name%3Dvpc-a") || strings.Contains(last, "/namespaces/") {
		t.Errorf("lookup across namespaces = %s", last)
	}
	// A cluster-scoped target is read by name.
	w.setState(State{Phase: PhaseSynced})
	found, err = ix.Lookup(ctx, testSource, "c2", "", "gateway")
	if want := []kcp.Meta{{Name: "gateway", UID: "g1"}}; err != nil || !reflect.DeepEqual(found, want) {
		t.Errorf("Lookup(gateway) = %+v, %v; want %+v", found, err, want)
	}
	r2 = shard2.requested()
	if last := r2[len(r2)-1]; last != "/clusters/c2/apis/compute.io/v1/virtualmachines/gateway?" {
		t.Errorf("lookup of a cluster-scoped object = %s", last)
	}

	// A cluster that no shard serves binds no export: nothing to read.
	if seen, _, err := confirm(ctx, ix, testSource, []fieldpath.Reference{vpcRef}, "c3", "default", "vpc-a"); err != nil || seen != nil {
		t.Errorf("Confirm(c3) = %v, %v", seen, err)
	}
	if got := retried(t, ix); len(got) != 0 {
		t.Errorf("retries reported: %v", got)
	}
	// Lookup, which reads the objects that dependents' writes add
	// references to, concludes so once the refusals have lasted
	// route.BindingSettle.
	settleCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if found, err := ix.Lookup(settleCtx, testSource, "c3", "default", "vpc-a"); err != nil || len(found) != 0 {
		t.Errorf("Lookup(c3) = %v, %v", found, err)
	}
	if got := w.readThroughOf("c3"); got != "" {
		t.Errorf("c3 was recorded as read through %q", got)
	}
	if got := retried(t, ix); len(got) == 0 || slices.ContainsFunc(got, func(c string) bool { return c != route.CauseUnbound }) {
		t.Errorf("retries reported: %v, want some %s", got, route.CauseUnbound)
	}
	// A source that is not watched cannot be read.
	other := Source{Export: testSource.Export, Resource: vms.GroupResource().WithVersion("v2")}
	if _, _, err := confirm(ctx, ix, other, []fieldpath.Reference{vpcRef}, "c2", "default", "vpc-a"); err == nil {
		t.Error("Confirm() of a source that is not watched succeeded")
	}
	if _, err := ix.Lookup(ctx, other, "c2", "default", "vpc-a"); err == nil {
		t.Error("Lookup() of a source that is not watched succeeded")
	}
}

// Confirm reads the namespace of the object only if the dependents are
// namespaced: cluster-scoped dependents are read in the whole cluster,
// whatever namespace is given.
func TestConfirmReadsTheScopeOfTheSource(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[{"metadata":{"name":"gateway","uid":"g1"},"spec":{"vpcRef":{"name":"vpc-a"}}}]}`}}
	ix, w := routedIndex(t, true, Options{}, shard)
	ctx := context.Background()
	tests := []struct {
		name       string
		namespaced bool
		namespace  string
		want       string
	}{
		{"cluster-scoped dependents, with a namespace", false, "default", "/clusters/c1/apis/compute.io/v1/virtualmachines?"},
		{"cluster-scoped dependents, without one", false, "", "/clusters/c1/apis/compute.io/v1/virtualmachines?"},
		{"namespaced dependents, with a namespace", true, "default", "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines?"},
		{"namespaced dependents of a cluster-scoped object", true, "", "/clusters/c1/apis/compute.io/v1/virtualmachines?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w.setState(State{Phase: PhaseSynced, Namespaced: tt.namespaced})
			deps, scanned, err := confirm(ctx, ix, testSource, []fieldpath.Reference{vpcRef}, "c1", tt.namespace, "vpc-a")
			if want := []kcp.Meta{{Cluster: "c1", Name: "gateway", UID: "g1"}}; err != nil || scanned != 1 || !reflect.DeepEqual(deps, want) {
				t.Errorf("Confirm() = %v, %d, %v; want %v", deps, scanned, err, want)
			}
			r := shard.requested()
			if last := r[len(r)-1]; last != tt.want {
				t.Errorf("read %s, want %s", last, tt.want)
			}
		})
	}
}

// The scope is decided on every attempt: a read retried because the export
// had not been read yet reads the scope the export says.
func TestConfirmDecidesTheScopeOnEveryAttempt(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}}
	ix, w := routedIndex(t, false, Options{}, shard)
	w.setState(State{Phase: PhaseSyncing})
	// The export is read right after the first attempt.
	w.onShards = func() {
		w.lock.Lock()
		defer w.lock.Unlock()
		w.inspected, w.state = true, State{Phase: PhaseSynced, Namespaced: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := confirm(ctx, ix, testSource, []fieldpath.Reference{vpcRef}, "c1", "default", "vpc-a"); err != nil {
		t.Fatal(err)
	}
	if r := shard.requested(); !slices.Equal(r, []string{"/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines?"}) {
		t.Errorf("requests %v, want one read of the namespace", r)
	}
	if got := retried(t, ix); !slices.Equal(got, []string{route.CauseNotInspected}) {
		t.Errorf("retries reported %v, want one %s", got, route.CauseNotInspected)
	}
}

// A read that fails for a reason that clears by itself is retried within
// the request, and reported.
func TestConfirmAndLookupRetry(t *testing.T) {
	initializing := status(http.StatusServiceUnavailable, "ServiceUnavailable", "storage is (re)initializing", "1")
	shard := &fakeShard{
		clusters: map[string]string{"c1": `{"items":[{"metadata":{"name":"vm-1","namespace":"default","uid":"u1"},"spec":{"vpcRef":{"name":"vpc-a"}}}]}`},
		objects:  map[string]string{"c1/default/vpc-a": `{"metadata":{"name":"vpc-a","namespace":"default","uid":"v1"}}`},
	}
	shard.failNext(initializing)
	ix, _ := routedIndex(t, true, Options{}, shard)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	deps, scanned, err := confirm(ctx, ix, testSource, []fieldpath.Reference{vpcRef}, "c1", "default", "vpc-a")
	if want := []kcp.Meta{{Cluster: "c1", Namespace: "default", Name: "vm-1", UID: "u1"}}; err != nil || scanned != 1 || !reflect.DeepEqual(deps, want) {
		t.Errorf("Confirm() = %v, %d, %v; want %v", deps, scanned, err, want)
	}
	if got := retried(t, ix); !slices.Equal(got, []string{vw.CauseUnavailable}) {
		t.Errorf("Confirm retries reported %v, want one %s", got, vw.CauseUnavailable)
	}
	if r := shard.requested(); len(r) != 2 {
		t.Errorf("Confirm made %d requests, want 2: %v", len(r), r)
	}
	shard.failNext(initializing, initializing)
	found, err := ix.Lookup(ctx, testSource, "c1", "default", "vpc-a")
	if want := []kcp.Meta{{Namespace: "default", Name: "vpc-a", UID: "v1"}}; err != nil || !reflect.DeepEqual(found, want) {
		t.Errorf("Lookup() = %v, %v; want %v", found, err, want)
	}
	if got := retried(t, ix); !slices.Equal(got, []string{vw.CauseUnavailable, vw.CauseUnavailable, vw.CauseUnavailable}) {
		t.Errorf("retries reported %v, want three %s", got, vw.CauseUnavailable)
	}
	if r := shard.requested(); len(r) != 5 {
		t.Errorf("Lookup made %d requests, want 3", len(r)-2)
	}
	// A failure that a retry does not change is not retried.
	shard.failNext(status(http.StatusInternalServerError, "InternalError", "boom", ""))
	if _, _, err := confirm(ctx, ix, testSource, []fieldpath.Reference{vpcRef}, "c1", "default", "vpc-a"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Confirm() after an internal error = %v", err)
	}
	if got := retried(t, ix); len(got) != 3 || len(shard.requested()) != 6 {
		t.Errorf("an internal error was retried: %v", got)
	}
}

// Before the APIExport of a source has been read, which shards serve it is
// not known: a read fails (after retries), it never finds "nothing".
func TestReadsBeforeTheExportWasReadFail(t *testing.T) {
	ix, _ := routedIndex(t, false, Options{})
	ctx := context.Background()
	err := confirmErr(ix, "c1")
	if !errors.Is(err, route.ErrNotInspected) {
		t.Errorf("Confirm() error = %v, want route.ErrNotInspected", err)
	}
	if _, err := ix.Lookup(ctx, testSource, "c1", "default", "vpc-a"); !errors.Is(err, route.ErrNotInspected) {
		t.Errorf("Lookup() error = %v, want route.ErrNotInspected", err)
	}
	if cause, retry := route.RetryCause(err); !retry || cause != route.CauseNotInspected {
		t.Errorf("route.RetryCause() = %q, %v; want a retry", cause, retry)
	}
	if got := retried(t, ix); len(got) < 2 || slices.ContainsFunc(got, func(c string) bool { return c != route.CauseNotInspected }) {
		t.Errorf("retries reported %v, want some %s", got, route.CauseNotInspected)
	}
}

// While a shard starts, its virtual workspace refuses workspaces whose
// bindings it has not synced yet. A workspace that the index has seen
// dependents of binds the export: every shard refusing it is a reason to
// retry, never "no dependents".
func TestReadsOfAKnownClusterThatEveryShardRefusesFail(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{}}
	ix, w := routedIndex(t, true, Options{}, shard)
	vm := &store.Object{ObjectMeta: metav1.ObjectMeta{Name: "vm-1", Namespace: "default", UID: "u1"}, Cluster: "c1"}
	shardStore := w.store.ForShard(w.urls[0], func() {})
	if err := shardStore.Add(vm); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err := confirmErr(ix, "c1")
	if !errors.Is(err, route.ErrRefused) {
		t.Fatalf("Confirm() error = %v, want route.ErrRefused", err)
	}
	if cause, retry := route.RetryCause(err); !retry || cause != route.CauseRefused {
		t.Errorf("route.RetryCause() = %q, %v; want a retry", cause, retry)
	}
	if got := retried(t, ix); len(got) < 2 || slices.ContainsFunc(got, func(c string) bool { return c != route.CauseRefused }) {
		t.Errorf("retries reported %v, want some %s", got, route.CauseRefused)
	}
	if _, err := ix.Lookup(ctx, testSource, "c1", "default", "vpc-a"); !errors.Is(err, route.ErrRefused) {
		t.Errorf("Lookup() error = %v, want route.ErrRefused", err)
	}
	// A workspace the index knows nothing of does not bind the export.
	if err := confirmErr(ix, "c9"); err != nil {
		t.Errorf("Confirm(unknown cluster) = %v, want nil", err)
	}
	// Once its dependents are gone (the workspace unbound the export),
	// neither does the first one: its deletes are not refused forever.
	if err := shardStore.Delete(vm); err != nil {
		t.Fatal(err)
	}
	if err := confirmErr(ix, "c1"); err != nil {
		t.Errorf("Confirm(cluster without dependents any more) = %v, want nil", err)
	}
	// A complete listing counts anew.
	if err := shardStore.Replace([]any{vm, &store.Object{ObjectMeta: metav1.ObjectMeta{Name: "vm-2"}, Cluster: "c2"}}, ""); err != nil {
		t.Fatal(err)
	}
	if err := confirmErr(ix, "c1"); !errors.Is(err, route.ErrRefused) {
		t.Errorf("Confirm() after a listing with dependents of c1 = %v, want route.ErrRefused", err)
	}
	if err := shardStore.Replace(nil, ""); err != nil {
		t.Fatal(err)
	}
	if err := confirmErr(ix, "c1"); err != nil {
		t.Errorf("Confirm() after an empty listing = %v, want nil", err)
	}
}

// The objects of a version that the export does not serve cannot be read:
// reads fail with ErrVersionNotServed, and are not retried.
func TestReadsOfAVersionNotServedFail(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}}
	ix, w := routedIndex(t, true, Options{}, shard)
	w.setState(State{Phase: PhaseVersionNotServed, Namespaced: true, Message: "the APIExport serves v2"})
	ctx := context.Background()
	if _, _, err := confirm(ctx, ix, testSource, []fieldpath.Reference{vpcRef}, "c1", "default", "vpc-a"); !errors.Is(err, ErrVersionNotServed) || !strings.Contains(err.Error(), "serves v2") {
		t.Errorf("Confirm() = %v, want ErrVersionNotServed", err)
	}
	n := len(shard.requested())
	if _, err := ix.Lookup(ctx, testSource, "c1", "default", "vpc-a"); !errors.Is(err, ErrVersionNotServed) {
		t.Errorf("Lookup() = %v, want ErrVersionNotServed", err)
	}
	if len(shard.requested()) != n {
		t.Error("Lookup() read a version that is not served")
	}
	// A workspace that does not bind the export has nothing to read.
	if _, _, err := confirm(ctx, ix, testSource, []fieldpath.Reference{vpcRef}, "c9", "default", "vpc-a"); err != nil {
		t.Errorf("Confirm(c9) = %v", err)
	}
	// A list that the shard does not find is of a version it does not serve.
	w.setState(State{Phase: PhaseSynced, Namespaced: true})
	shard.failNext(status(http.StatusNotFound, "NotFound", "the server could not find the requested resource", ""))
	if _, _, err := confirm(ctx, ix, testSource, []fieldpath.Reference{vpcRef}, "c1", "default", "vpc-a"); !errors.Is(err, ErrVersionNotServed) {
		t.Errorf("Confirm() of a list not found = %v, want ErrVersionNotServed", err)
	}
	if got := retried(t, ix); len(got) != 0 {
		t.Errorf("retries reported: %v", got)
	}
}

// confirmErr returns the error of confirming that nothing in the default
// namespace of cluster references vpc-a.
func confirmErr(ix *Index, cluster logicalcluster.Name) error {
	_, _, err := confirm(context.Background(), ix, testSource, []fieldpath.Reference{vpcRef}, cluster, "default", "vpc-a")
	return err
}

// A reference that names a namespace can reach the object from any
// namespace: its dependents are read in the whole cluster, and only those
// that name the object's namespace (or none, from its own) are found.
func TestConfirmReadsEveryNamespaceForReferencesAcrossNamespaces(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[
		{"metadata":{"name":"r1","namespace":"apps","uid":"u1"},"spec":{"parentRefs":[{"name":"edge","namespace":"infra"}]}},
		{"metadata":{"name":"r2","namespace":"apps","uid":"u2"},"spec":{"parentRefs":[{"name":"edge"}]}},
		{"metadata":{"name":"r3","namespace":"infra","uid":"u3"},"spec":{"parentRefs":[{"name":"edge"}]}}]}`}}
	ix, w := routedIndex(t, true, Options{}, shard)
	w.setState(State{Phase: PhaseSynced, Namespaced: true})
	parents := fieldpathtest.MustParseReference(fieldpath.ReferenceSpec{Path: ".spec.parentRefs[*].name", NamespacePath: "namespace"})
	deps, scanned, err := confirm(context.Background(), ix, testSource, []fieldpath.Reference{parents}, "c1", "infra", "edge")
	want := []kcp.Meta{{Cluster: "c1", Namespace: "apps", Name: "r1", UID: "u1"}, {Cluster: "c1", Namespace: "infra", Name: "r3", UID: "u3"}}
	if err != nil || scanned != 3 || !reflect.DeepEqual(deps, want) {
		t.Errorf("Confirm() = %v, %d, %v; want %v", deps, scanned, err, want)
	}
	if r := shard.requested(); r[len(r)-1] != "/clusters/c1/apis/compute.io/v1/virtualmachines?" {
		t.Errorf("read %s, want every namespace", r[len(r)-1])
	}
}

// An index that reads only some shards serves the workspaces on them: one
// it holds dependents of or has read at once, any other after asking its
// shards once; a workspace on no shard it reads is not served.
func TestServes(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`, "c2": `{"items":[]}`}}
	ctx := context.Background()

	all, _ := routedIndex(t, true, Options{}, shard)
	if err := all.Serves(ctx, testSource, "c9"); err != nil {
		t.Errorf("an index of every shard does not serve c9: %v", err)
	}
	if r := shard.requested(); len(r) != 0 {
		t.Errorf("an index of every shard read %v", r)
	}

	some, w := routedIndex(t, true, Options{Shards: []string{"https://shard-1"}, ShardName: "shard-1"}, shard)
	if err := w.store.ForShard(w.urls[0], func() {}).Add(dependent(t, nil, "c1", "default/vm-1", `{}`, false)); err != nil {
		t.Fatal(err)
	}
	if err := some.Serves(ctx, testSource, "c1"); err != nil {
		t.Errorf("c1, whose dependents the index holds: %v", err)
	}
	if r := shard.requested(); len(r) != 0 {
		t.Errorf("asked for c1: %v", r)
	}
	for range 2 {
		if err := some.Serves(ctx, testSource, "c2"); err != nil {
			t.Errorf("c2: %v", err)
		}
	}
	if r := shard.requested(); len(r) != 1 || r[0] != "/clusters/c2/apis/compute.io/v1/virtualmachines?limit=1&resourceVersion=0" {
		t.Errorf("asked for c2: %v, want one LIST from the watch cache", r)
	}
	err := some.Serves(ctx, testSource, "c3")
	if !errors.Is(err, ErrNotServed) || !strings.Contains(err.Error(), "shard-1 (https://shard-1)") {
		t.Errorf("c3, on another shard: %v", err)
	}
}

// A live read is answered from the index when the index has caught up with
// the scope's current resourceVersion on a busy shard, and listed
// otherwise: the shard's list and the index disagree, so the answer shows
// which was used.
func TestConfirmAnswersFromAnIndexThatCaughtUp(t *testing.T) {
	const listed = `{"metadata":{"resourceVersion":"100"},"items":[{"metadata":{"name":"vm-listed","namespace":"default","uid":"l1"},"spec":{"vpcRef":{"name":"vpc-a"}}}]}`
	probe := "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines?limit=1"
	list := "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines?"
	tests := []struct {
		name string
		// indexedAt is the resourceVersion of the index's list, advancedTo
		// that of an event stored 50ms after Confirm was called, if set.
		indexedAt, advancedTo string
		idle                  bool
		state                 Phase
		paths                 []fieldpath.Reference
		wantFrom              string
		wantRequests          []string
	}{
		{name: "caught up", indexedAt: "100", wantFrom: "vm-indexed", wantRequests: []string{probe}},
		{name: "ahead", indexedAt: "120", wantFrom: "vm-indexed", wantRequests: []string{probe}},
		{name: "catches up while waiting", indexedAt: "90", advancedTo: "101", wantFrom: "vm-indexed", wantRequests: []string{probe}},
		{name: "does not catch up in time", indexedAt: "90", wantFrom: "vm-listed", wantRequests: []string{probe, list}},
		{name: "an event of a lower version does not count", indexedAt: "90", advancedTo: "80", wantFrom: "vm-listed", wantRequests: []string{probe, list}},
		{name: "idle shard", indexedAt: "100", idle: true, wantFrom: "vm-listed", wantRequests: []string{list}},
		{name: "version that is not a number", indexedAt: "abc", wantFrom: "vm-listed", wantRequests: []string{list}},
		{name: "source syncing", indexedAt: "100", state: PhaseSyncing, wantFrom: "vm-listed", wantRequests: []string{list}},
		{name: "path not indexed", indexedAt: "100", paths: []fieldpath.Reference{vpcRef, nics}, wantFrom: "vm-listed", wantRequests: []string{list}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shard := &fakeShard{clusters: map[string]string{"c1": listed}}
			ix, w := routedIndex(t, true, Options{}, shard)
			state := tt.state
			if state == "" {
				state = PhaseSynced
			}
			w.setState(State{Phase: state, Namespaced: true})
			if tt.idle {
				ix.now = func() time.Time { return time.Now().Add(2 * catchUpBusy) }
			}
			shardStore := w.store.ForShard(w.urls[0], func() {})
			if err := shardStore.Replace([]any{dependent(t, w.paths, "c1", "default/vm-indexed", `{"vpcRef":{"name":"vpc-a"}}`, false)}, tt.indexedAt); err != nil {
				t.Fatal(err)
			}
			if tt.advancedTo != "" {
				go func() {
					time.Sleep(50 * time.Millisecond)
					shardStore.(cache.ResourceVersionUpdater).UpdateResourceVersion(tt.advancedTo)
				}()
			}
			paths := tt.paths
			if paths == nil {
				paths = []fieldpath.Reference{vpcRef}
			}
			deps, _, err := confirm(context.Background(), ix, testSource, paths, "c1", "default", "vpc-a")
			if err != nil || len(deps) != 1 || deps[0].Name != tt.wantFrom {
				t.Errorf("Confirm() = %v, %v; want %s", deps, err, tt.wantFrom)
			}
			if got := shard.requested(); !reflect.DeepEqual(got, tt.wantRequests) {
				t.Errorf("requests = %q, want %q", got, tt.wantRequests)
			}
			wantHow := ReadListed
			if tt.wantFrom == "vm-indexed" {
				wantHow = ReadCaughtUp
			}
			if reads := readsOf(t, ix); len(reads) != 1 || reads[0] != wantHow {
				t.Errorf("reads counted %q, want [%s]", reads, wantHow)
			}
		})
	}
}

// confirm is Confirm of a query without a scheme: every dependent in scope
// is listed.
func confirm(ctx context.Context, ix *Index, src Source, paths []fieldpath.Reference, cluster logicalcluster.Name, namespace, name string) ([]kcp.Meta, int, error) {
	return ix.Confirm(ctx, Query{Source: src, Paths: paths, Cluster: cluster, Namespace: namespace, Name: name})
}

// ListTargets reads a namespace in pages of at most listPage objects, and
// stops after most; a page that fails for a reason that clears by itself
// is retried.
func TestListTargets(t *testing.T) {
	items := func(n int) []string {
		out := make([]string, 0, n)
		for i := range n {
			out = append(out, fmt.Sprintf(`{"metadata":{"name":"vpc-%d","namespace":"default"}}`, i))
		}
		return out
	}
	tests := []struct {
		name         string
		objects      int
		most         int
		fail         bool
		notServed    bool
		wantComplete bool
		wantVisited  int
		wantPages    int
		wantErr      error
	}{
		{name: "a namespace of one page", objects: 10, most: 100, wantComplete: true, wantVisited: 10, wantPages: 1},
		{name: "a namespace of several pages, all read", objects: 1200, most: 10000, wantComplete: true, wantVisited: 1200, wantPages: 3},
		{name: "an empty namespace", objects: 0, most: 100, wantComplete: true, wantPages: 1},
		{name: "a namespace larger than most: read up to most, not all", objects: 5000, most: 600, wantVisited: 1000, wantPages: 2},
		{name: "a small most asks for a small page", objects: 5000, most: 20, wantVisited: 21, wantPages: 1},
		{name: "a page that fails for a reason that clears is retried", objects: 700, most: 10000, fail: true, wantComplete: true, wantVisited: 700, wantPages: 2},
		{name: "a version not served is not read", objects: 10, most: 100, notServed: true, wantErr: ErrVersionNotServed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shard := &fakeShard{clusters: map[string]string{"c1": ""}, paged: map[string][]string{"c1": items(tt.objects)}}
			ix, w := routedIndex(t, true, Options{}, shard)
			if tt.notServed {
				w.setState(State{Phase: PhaseVersionNotServed, Namespaced: true, Message: "the APIExport serves v2"})
			}
			if tt.fail {
				shard.failNext(status(http.StatusServiceUnavailable, "ServiceUnavailable", "busy", ""))
			}
			visited := 0
			complete, err := ix.ListTargets(context.Background(), testSource, "c1", "default", tt.most, func(raw []byte) error {
				visited++
				return nil
			})
			if !errors.Is(err, tt.wantErr) || tt.wantErr == nil && err != nil {
				t.Fatalf("ListTargets() = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if complete != tt.wantComplete || visited != tt.wantVisited {
				t.Errorf("ListTargets() = %v after %d objects, want %v after %d", complete, visited, tt.wantComplete, tt.wantVisited)
			}
			pages := 0
			for _, r := range shard.requested() {
				if strings.Contains(r, "/namespaces/default/virtualmachines?") && strings.Contains(r, "limit=") {
					pages++
				}
			}
			if tt.fail {
				pages-- // the failed one
			}
			if pages != tt.wantPages {
				t.Errorf("%d pages read, want %d: %v", pages, tt.wantPages, shard.requested())
			}
		})
	}
}

// ListTargets reads the objects that dependents' writes add references to:
// a workspace that every shard refuses, as kcp's virtual workspace does for
// a moment after the workspace bound the export, holds none only once the
// refusals have lasted route.BindingSettle. Until then the LIST is retried
// (route.ErrUnbound), and a request whose deadline comes first fails
// rather than find nothing.
func TestListTargetsWaitsForABinding(t *testing.T) {
	forbidden := status(http.StatusForbidden, "Forbidden", "could not find suitable APIBinding in target logical cluster", "")
	tests := []struct {
		name string
		// refusals are the requests refused before the shard serves c1;
		// -1 for a shard that never does.
		refusals    int
		deadline    time.Duration
		wantVisited int
		wantErr     error
		wantAtLeast time.Duration
	}{
		{name: "a workspace that bound the export a moment ago is listed once it is served", refusals: 2, deadline: 5 * time.Second, wantVisited: 3},
		{name: "a workspace refused for the settle does not bind the export", refusals: -1, deadline: 5 * time.Second, wantAtLeast: route.BindingSettle},
		{name: "a deadline before the settle fails", refusals: -1, deadline: route.BindingSettle / 4, wantErr: route.ErrUnbound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shard := &fakeShard{clusters: map[string]string{}, paged: map[string][]string{}}
			if tt.refusals >= 0 {
				shard.clusters["c1"] = ""
				shard.paged["c1"] = []string{`{"metadata":{"name":"vpc-0","namespace":"default"}}`, `{"metadata":{"name":"vpc-1","namespace":"default"}}`, `{"metadata":{"name":"vpc-2","namespace":"default"}}`}
				for range tt.refusals {
					shard.failNext(forbidden)
				}
			}
			ix, _ := routedIndex(t, true, Options{}, shard)
			ctx, cancel := context.WithTimeout(context.Background(), tt.deadline)
			defer cancel()
			start := time.Now()
			visited := 0
			complete, err := ix.ListTargets(ctx, testSource, "c1", "default", 100, func(raw []byte) error {
				visited++
				return nil
			})
			if !errors.Is(err, tt.wantErr) || tt.wantErr == nil && err != nil {
				t.Fatalf("ListTargets() = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if !complete || visited != tt.wantVisited {
				t.Errorf("ListTargets() = %v after %d objects, want complete after %d", complete, visited, tt.wantVisited)
			}
			if took := time.Since(start); took < tt.wantAtLeast {
				t.Errorf("ListTargets() found nothing after %v, want not before %v", took, tt.wantAtLeast)
			}
			if got := retried(t, ix); len(got) == 0 || slices.ContainsFunc(got, func(c string) bool { return c != route.CauseUnbound }) {
				t.Errorf("retries reported %v, want some %s", got, route.CauseUnbound)
			}
		})
	}
}

// A 404 that names no object (a resource that the virtual workspace does
// not serve yet, its APIExport created or bound a moment ago) says nothing
// about the object: Lookup retries it, and never reports "no such object".
func TestLookupRetriesANotFoundThatNamesNoObject(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{"c1": `{"items":[]}`}, objects: map[string]string{"c1/default/vpc-a": `{"metadata":{"name":"vpc-a","namespace":"default","uid":"u1"}}`}}
	notServed := status(http.StatusNotFound, "NotFound", "the server could not find the requested resource", "")
	shard.failNext(notServed, notServed)
	ix, _ := routedIndex(t, true, Options{}, shard)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	found, err := ix.Lookup(ctx, testSource, "c1", "default", "vpc-a")
	if err != nil || len(found) != 1 || found[0].Name != "vpc-a" {
		t.Fatalf("Lookup() = %v, %v; want vpc-a", found, err)
	}
	if got := retried(t, ix); !slices.Equal(got, []string{route.CauseUnbound, route.CauseUnbound}) {
		t.Errorf("retries reported %v, want two %s", got, route.CauseUnbound)
	}
}

// kcp lists a shard in an export's endpoint slice only once a workspace on
// it binds the export. Right after the first binding the index knows no
// shard of the export; the reads of referenced objects have it read the
// export again, and find the shard within route.BindingSettle.
func TestReadsOfReferencedObjectsFindTheShardOfAFirstBinding(t *testing.T) {
	const vpc = `{"metadata":{"name":"vpc-0","namespace":"default","uid":"u1"}}`
	for _, read := range []string{"ListTargets", "Lookup"} {
		t.Run(read, func(t *testing.T) {
			shard := &fakeShard{clusters: map[string]string{"c1": ""}, paged: map[string][]string{"c1": {vpc}},
				objects: map[string]string{"c1/default/vpc-0": vpc}}
			ix, w := routedIndex(t, true, Options{}, shard)
			w.lock.Lock()
			url := w.urls[0]
			w.urls = nil // no workspace bound the export as of the last poll
			w.onReinspect = func() {
				w.lock.Lock()
				defer w.lock.Unlock()
				w.urls = []string{url}
			}
			w.lock.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var (
				got []string
				err error
			)
			switch read {
			case "ListTargets":
				_, err = ix.ListTargets(ctx, testSource, "c1", "default", 100, func(raw []byte) error {
					m, err := kcp.ReadMeta(raw)
					got = append(got, m.Name)
					return err
				})
			case "Lookup":
				var found []kcp.Meta
				found, err = ix.Lookup(ctx, testSource, "c1", "default", "vpc-0")
				for _, m := range found {
					got = append(got, m.Name)
				}
			}
			if err != nil || !slices.Equal(got, []string{"vpc-0"}) {
				t.Fatalf("%s() = %v, %v; want vpc-0", read, got, err)
			}
			if w.reinspections == 0 {
				t.Error("the export was not read again")
			}
		})
	}
}
