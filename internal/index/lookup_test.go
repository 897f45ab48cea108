package index

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// fakeShard serves the virtual workspace of one shard: the objects of the
// clusters it hosts, 403 for any other cluster.
type fakeShard struct {
	clusters map[string]string // cluster -> list body
	objects  map[string]string // cluster/namespace/name -> object body
	lock     sync.Mutex
	requests []string
}

func (s *fakeShard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.lock.Lock()
	s.requests = append(s.requests, r.URL.Path+"?"+r.URL.RawQuery)
	s.lock.Unlock()
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/clusters/"), "/")
	list, ok := s.clusters[parts[0]]
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
		return
	}
	// /clusters/<c>/apis/<g>/<v>/namespaces/<ns>/<resource>[/<name>]
	if len(parts) == 8 {
		if obj, ok := s.objects[parts[0]+"/"+parts[5]+"/"+parts[7]]; ok {
			fmt.Fprint(w, obj)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		return
	}
	fmt.Fprint(w, list)
}

// routedIndex returns an index whose source testSource is served by the
// given shards, inspected or not.
func routedIndex(t testing.TB, inspected bool, shards ...*fakeShard) *Index {
	t.Helper()
	ix := &Index{sources: map[Source]*sourceWatch{}, cfg: &rest.Config{}, readers: map[string]*reader{}}
	sw := &sourceWatch{src: testSource, store: newStore(), shardOf: map[logicalcluster.Name]string{},
		state: State{Phase: PhaseSynced, Namespaced: true}, inspected: inspected}
	for _, s := range shards {
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		sw.urls = append(sw.urls, srv.URL)
	}
	ix.sources[testSource] = sw
	return ix
}

func TestConfirmAndLookupFindTheShardOfTheCluster(t *testing.T) {
	shard1 := &fakeShard{clusters: map[string]string{"c1": `{"items":[{"metadata":{"name":"vm-1"}}]}`}}
	shard2 := &fakeShard{
		clusters: map[string]string{"c2": `{"items":[{"metadata":{"name":"vm-2","namespace":"default","uid":"u2"},"spec":{"vpcRef":{"name":"vpc-a"}}}]}`},
		objects:  map[string]string{"c2/default/vpc-a": `{"metadata":{"name":"vpc-a","namespace":"default","deletionTimestamp":"2026-01-01T00:00:00Z"}}`},
	}
	ix := routedIndex(t, true, shard1, shard2)
	ctx := context.Background()

	seen, scanned, err := ix.Confirm(ctx, testSource, []fieldpath.Path{vpcRef}, "c2", "default", "vpc-a")
	if want := []Dependent{{Cluster: "c2", Namespace: "default", Name: "vm-2", UID: "u2"}}; err != nil || scanned != 1 || !reflect.DeepEqual(seen, want) {
		t.Fatalf("Confirm(c2) = %v, %d, %v; want vm-2 from the second shard", seen, scanned, err)
	}
	if len(shard1.requests) != 1 || len(shard2.requests) != 1 {
		t.Errorf("requests: shard 1 %v, shard 2 %v", shard1.requests, shard2.requests)
	}
	// The shard that served c2 is asked first from now on.
	if _, err := ix.Lookup(ctx, testSource, "c2", "default", "vpc-a"); err != nil {
		t.Fatal(err)
	}
	if len(shard1.requests) != 1 {
		t.Errorf("the first shard was asked again: %v", shard1.requests)
	}

	found, err := ix.Lookup(ctx, testSource, "c2", "default", "vpc-a")
	if want := []Object{{Namespace: "default", Name: "vpc-a", Terminating: true}}; err != nil || !reflect.DeepEqual(found, want) {
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
	if last := shard2.requests[len(shard2.requests)-1]; !strings.Contains(last, "fieldSelector=metadata.name%3Dvpc-a") || strings.Contains(last, "/namespaces/") {
		t.Errorf("lookup across namespaces = %s", last)
	}

	// A cluster that no shard serves binds no export: nothing to read.
	if seen, _, err := ix.Confirm(ctx, testSource, []fieldpath.Path{vpcRef}, "c3", "default", "vpc-a"); err != nil || seen != nil {
		t.Errorf("Confirm(c3) = %v, %v", seen, err)
	}
}

// Before the APIExport of a source has been read, which shards serve it is
// not known: a read fails (and is retried), it never finds "nothing".
func TestReadsBeforeTheExportWasReadFail(t *testing.T) {
	ix := routedIndex(t, false)
	ctx := context.Background()
	err := confirmErr(ix, "c1")
	if !errors.Is(err, ErrNotInspected) {
		t.Errorf("Confirm() error = %v, want ErrNotInspected", err)
	}
	if _, err := ix.Lookup(ctx, testSource, "c1", "default", "vpc-a"); !errors.Is(err, ErrNotInspected) {
		t.Errorf("Lookup() error = %v, want ErrNotInspected", err)
	}
	if cause, retry := RetryCause(err); !retry || cause != CauseNotInspected {
		t.Errorf("RetryCause() = %q, %v; want a retry", cause, retry)
	}
}

// While a shard starts, its virtual workspace refuses workspaces whose
// bindings it has not synced yet. A workspace that the index has seen
// dependents of binds the export: every shard refusing it is a reason to
// retry, never "no dependents".
func TestReadsOfAKnownClusterThatEveryShardRefusesFail(t *testing.T) {
	shard := &fakeShard{clusters: map[string]string{}}
	ix := routedIndex(t, true, shard)
	sw := ix.sources[testSource]
	vm := &object{ObjectMeta: metav1.ObjectMeta{Name: "vm-1", Namespace: "default", UID: "u1"}, Cluster: "c1"}
	shardStore := &shardStore{store: sw.store, shard: sw.urls[0], synced: func() {}}
	if err := shardStore.Add(vm); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err := confirmErr(ix, "c1")
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("Confirm() error = %v, want ErrRefused", err)
	}
	if cause, retry := RetryCause(err); !retry || cause != CauseRefused {
		t.Errorf("RetryCause() = %q, %v; want a retry", cause, retry)
	}
	if _, err := ix.Lookup(ctx, testSource, "c1", "default", "vpc-a"); !errors.Is(err, ErrRefused) {
		t.Errorf("Lookup() error = %v, want ErrRefused", err)
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
	if err := shardStore.Replace([]any{vm, &object{ObjectMeta: metav1.ObjectMeta{Name: "vm-2"}, Cluster: "c2"}}, ""); err != nil {
		t.Fatal(err)
	}
	if !sw.store.holds("c1") || !sw.store.holds("c2") || sw.store.holds("c9") {
		t.Errorf("after Replace: holds(c1) = %v, holds(c2) = %v, holds(c9) = %v", sw.store.holds("c1"), sw.store.holds("c2"), sw.store.holds("c9"))
	}
	if err := shardStore.Replace(nil, ""); err != nil || sw.store.holds("c1") {
		t.Errorf("after an empty Replace: holds(c1) = %v (%v)", sw.store.holds("c1"), err)
	}
}

// confirmErr returns the error of confirming that nothing in the default
// namespace of cluster references vpc-a.
func confirmErr(ix *Index, cluster logicalcluster.Name) error {
	_, _, err := ix.Confirm(context.Background(), testSource, []fieldpath.Path{vpcRef}, cluster, "default", "vpc-a")
	return err
}
