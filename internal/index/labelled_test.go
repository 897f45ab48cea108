package index

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index/store/storetest"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// selectingShard serves the virtual workspace of one shard: a LIST answers
// the items of its label selector (lists), or fails with the status in
// fail; a LIST of at most one object (a probe) answers an empty list at
// resourceVersion 100.
type selectingShard struct {
	lists map[string][]string
	fail  map[string]int

	lock     sync.Mutex
	requests []url.Values
	paths    []string
}

func (s *selectingShard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.lock.Lock()
	s.requests = append(s.requests, q)
	s.paths = append(s.paths, r.URL.Path)
	s.lock.Unlock()
	if q.Get("limit") == "1" {
		fmt.Fprint(w, `{"metadata":{"resourceVersion":"100"},"items":[]}`)
		return
	}
	selector := q.Get("labelSelector")
	if code := s.fail[selector]; code != 0 {
		status(code, http.StatusText(code), "boom for "+selector, "")(w)
		return
	}
	fmt.Fprintf(w, `{"metadata":{"resourceVersion":"100"},"items":[%s]}`, strings.Join(s.lists[selector], ","))
}

func (s *selectingShard) requested() ([]url.Values, []string) {
	s.lock.Lock()
	defer s.lock.Unlock()
	return slices.Clone(s.requests), slices.Clone(s.paths)
}

// item is a VirtualMachine of c1 in namespace default whose .spec.vpcRef
// names vpc.
func item(name, vpc string) string {
	return fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"default","uid":"uid-%s"},"spec":{"vpcRef":{"name":%q}}}`, name, name, vpc)
}

// selectingIndex returns an index whose source testSource (namespaced,
// Synced) is served by shard, and the watch of it.
func selectingIndex(t *testing.T, shard *selectingShard) (*Index, *fakeWatch) {
	t.Helper()
	w := newFakeWatch(State{Phase: PhaseSynced, Namespaced: true}, vpcRef)
	w.inspected = true
	srv := httptest.NewServer(shard)
	t.Cleanup(srv.Close)
	w.urls = []string{srv.URL}
	return newTestIndex(t, w, Options{}), w
}

const testScheme = "fp-1"

func labelledQuery() Query {
	return Query{Source: testSource, Paths: []fieldpath.Reference{vpcRef}, Cluster: "c1", Namespace: "default", Name: "vpc-a", Target: vpcs, Scheme: testScheme}
}

// With a scheme, Confirm reads the dependents with the object's reference
// label and those not labelled under the scheme, with one LIST each, and
// returns the union of those that reference the object at a path.
func TestConfirmWithASchemeSelectsByLabel(t *testing.T) {
	byKey := reflabels.Key(vpcs, "vpc-a")
	stale := reflabels.StaleSelector(testScheme)
	shard := &selectingShard{lists: map[string][]string{
		// vm-collision carries the label but references another VPC (a
		// collision of keys, or a label that was right a moment ago).
		byKey: {item("vm-1", "vpc-a"), item("vm-both", "vpc-a"), item("vm-collision", "vpc-z")},
		// vm-both is also not labelled under the scheme (it is found by
		// both reads).
		stale: {item("vm-old", "vpc-a"), item("vm-both", "vpc-a"), item("vm-other", "vpc-b")},
		// What a read of everything would find.
		"": {item("vm-1", "vpc-a"), item("vm-both", "vpc-a"), item("vm-old", "vpc-a"), item("vm-unlabelled", "vpc-a")},
	}}
	ix, _ := selectingIndex(t, shard)
	deps, scanned, err := ix.Confirm(context.Background(), labelledQuery())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := storetest.Names(deps), []string{"c1/default/vm-1", "c1/default/vm-both", "c1/default/vm-old"}; !slices.Equal(got, want) {
		t.Errorf("Confirm() found %v, want %v (each once, and only those that reference vpc-a)", got, want)
	}
	if scanned != 6 {
		t.Errorf("scanned %d, want 6: what both reads listed", scanned)
	}
	requests, paths := shard.requested()
	if len(requests) != 2 {
		t.Fatalf("requests %v, want two LISTs", requests)
	}
	var selectors []string
	for i, q := range requests {
		if paths[i] != "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines" {
			t.Errorf("read %s, want the namespace of the object", paths[i])
		}
		if len(q) != 1 || len(q["labelSelector"]) != 1 {
			t.Errorf("query %v, want a label selector and nothing else", q)
		}
		selectors = append(selectors, q.Get("labelSelector"))
	}
	slices.Sort(selectors)
	want := []string{byKey, stale}
	slices.Sort(want)
	if !slices.Equal(selectors, want) {
		t.Errorf("selectors %q, want %q", selectors, want)
	}
	if got := readsOf(t, ix); !slices.Equal(got, []string{ReadSelected, ReadSelected}) {
		t.Errorf("reads counted %q, want two %s", got, ReadSelected)
	}
}

// Without a scheme, every dependent in scope is listed with one LIST.
func TestConfirmWithoutASchemeListsEverything(t *testing.T) {
	shard := &selectingShard{lists: map[string][]string{
		"": {item("vm-1", "vpc-a"), item("vm-2", "vpc-b"), item("vm-3", "vpc-a")},
	}}
	ix, _ := selectingIndex(t, shard)
	q := labelledQuery()
	q.Scheme = ""
	deps, scanned, err := ix.Confirm(context.Background(), q)
	if err != nil || scanned != 3 {
		t.Fatalf("Confirm() = %v, %d, %v; want 3 scanned", deps, scanned, err)
	}
	if got, want := storetest.Names(deps), []string{"c1/default/vm-1", "c1/default/vm-3"}; !slices.Equal(got, want) {
		t.Errorf("Confirm() found %v, want %v", got, want)
	}
	requests, paths := shard.requested()
	if len(requests) != 1 || len(requests[0]) != 0 || paths[0] != "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines" {
		t.Errorf("requests %v %v, want one LIST of the namespace without a selector", requests, paths)
	}
	if got := readsOf(t, ix); !slices.Equal(got, []string{ReadListed}) {
		t.Errorf("reads counted %q, want one %s", got, ReadListed)
	}
}

// A read by label is never answered from the index, which knows nothing of
// labels: with a scheme, Confirm lists even where the index has caught up.
func TestConfirmWithASchemeDoesNotCatchUp(t *testing.T) {
	shard := &selectingShard{lists: map[string][]string{reflabels.StaleSelector(testScheme): {item("vm-listed", "vpc-a")}}}
	ix, w := selectingIndex(t, shard)
	// The index has caught up (at 100, just now), and holds another
	// dependent.
	if err := w.store.ForShard(w.urls[0], func() {}).Replace([]any{dependent(t, w.paths, "c1", "default/vm-indexed", `{"vpcRef":{"name":"vpc-a"}}`, false)}, "100"); err != nil {
		t.Fatal(err)
	}
	deps, _, err := ix.Confirm(context.Background(), labelledQuery())
	if err != nil {
		t.Fatal(err)
	}
	if got := storetest.Names(deps); !slices.Equal(got, []string{"c1/default/vm-listed"}) {
		t.Errorf("Confirm() found %v, want what the reads listed", got)
	}
	requests, _ := shard.requested()
	for _, q := range requests {
		if q.Get("labelSelector") == "" {
			t.Errorf("a read without a selector was made: %v", q)
		}
	}
	if len(requests) != 2 {
		t.Errorf("requests %v, want the two LISTs by label", requests)
	}
	// Without a scheme, the same read is answered from the index.
	q := labelledQuery()
	q.Scheme = ""
	deps, _, err = ix.Confirm(context.Background(), q)
	if got := storetest.Names(deps); err != nil || !slices.Equal(got, []string{"c1/default/vm-indexed"}) {
		t.Errorf("Confirm() without a scheme = %v, %v; want the index's answer", got, err)
	}
	if requests, _ := shard.requested(); len(requests) != 3 || requests[2].Get("limit") != "1" {
		t.Errorf("requests %v, want a probe after the two LISTs by label", requests)
	}
}

// A reference that can name another namespace is read by label in the
// whole cluster, and checked against the object's namespace.
func TestConfirmWithASchemeAcrossNamespaces(t *testing.T) {
	parents := fieldpathtest.MustParseReference(fieldpath.ReferenceSpec{Path: ".spec.parentRefs[*].name", NamespacePath: "namespace"})
	byKey := reflabels.Key(vpcs, "edge")
	shard := &selectingShard{lists: map[string][]string{
		byKey: {
			`{"metadata":{"name":"r1","namespace":"apps","uid":"u1"},"spec":{"parentRefs":[{"name":"edge","namespace":"infra"}]}}`,
			// The label names edge in any namespace: this one's is apps.
			`{"metadata":{"name":"r2","namespace":"apps","uid":"u2"},"spec":{"parentRefs":[{"name":"edge"}]}}`,
		},
		reflabels.StaleSelector(testScheme): {
			`{"metadata":{"name":"r3","namespace":"infra","uid":"u3"},"spec":{"parentRefs":[{"name":"edge"}]}}`,
		},
	}}
	ix, _ := selectingIndex(t, shard)
	q := labelledQuery()
	q.Paths, q.Namespace, q.Name = []fieldpath.Reference{parents}, "infra", "edge"
	deps, scanned, err := ix.Confirm(context.Background(), q)
	want := []kcp.Meta{{Cluster: "c1", Namespace: "apps", Name: "r1", UID: "u1"}, {Cluster: "c1", Namespace: "infra", Name: "r3", UID: "u3"}}
	if err != nil || scanned != 3 || !reflect.DeepEqual(deps, want) {
		t.Errorf("Confirm() = %v, %d, %v; want %v", deps, scanned, err, want)
	}
	_, paths := shard.requested()
	if len(paths) != 2 || paths[0] != "/clusters/c1/apis/compute.io/v1/virtualmachines" || paths[1] != paths[0] {
		t.Errorf("read %v, want every namespace twice", paths)
	}
}

// A failure of either read fails the confirmation: a dependent either
// would have found could reference the object.
func TestConfirmWithASchemeFailsIfEitherReadFails(t *testing.T) {
	byKey := reflabels.Key(vpcs, "vpc-a")
	stale := reflabels.StaleSelector(testScheme)
	for _, failing := range []string{byKey, stale} {
		t.Run(failing, func(t *testing.T) {
			shard := &selectingShard{
				lists: map[string][]string{byKey: {item("vm-1", "vpc-a")}, stale: {item("vm-2", "vpc-a")}},
				fail:  map[string]int{failing: http.StatusInternalServerError},
			}
			ix, _ := selectingIndex(t, shard)
			_, _, err := ix.Confirm(context.Background(), labelledQuery())
			if err == nil || !strings.Contains(err.Error(), "boom for "+failing) {
				t.Errorf("Confirm() error = %v, want the failure of the read by %s", err, failing)
			}
			if requests, _ := shard.requested(); len(requests) != 2 {
				t.Errorf("requests %v, want two (an internal error is not retried)", requests)
			}
		})
	}
}
