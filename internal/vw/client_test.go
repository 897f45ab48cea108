package vw

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"
)

var vms = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}

func lc(s string) logicalcluster.Path { return logicalcluster.NewPath(s) }

func TestResourcePath(t *testing.T) {
	tests := []struct {
		cluster   logicalcluster.Path
		gvr       schema.GroupVersionResource
		namespace string
		want      string
	}{
		{lc("c1"), vms, "default", "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines"},
		{lc("c1"), vms, "", "/clusters/c1/apis/compute.io/v1/virtualmachines"},
		{logicalcluster.Wildcard, vms, "", "/clusters/*/apis/compute.io/v1/virtualmachines"},
		{lc("root:org:ws"), vms, "ns", "/clusters/root:org:ws/apis/compute.io/v1/namespaces/ns/virtualmachines"},
	}
	for _, tt := range tests {
		if got := "/" + strings.TrimPrefix(strings.Join(ResourcePath(tt.cluster, tt.gvr, tt.namespace), "/"), "/"); got != tt.want {
			t.Errorf("ResourcePath(%s, %s, %q) = %s, want %s", tt.cluster, tt.gvr, tt.namespace, got, tt.want)
		}
	}
}

func TestClientStreamsLists(t *testing.T) {
	var (
		lock     sync.Mutex
		requests []*url.URL
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lock.Lock()
		requests = append(requests, r.URL)
		lock.Unlock()
		if r.Header.Get("Accept") != "application/json" {
			t.Errorf("Accept = %q", r.Header.Get("Accept"))
		}
		switch {
		case strings.Contains(r.URL.Path, "/forbidden/"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"virtualmachines is forbidden: User \"webhook\" cannot list","reason":"Forbidden","code":403}`)
		case strings.Contains(r.URL.Path, "/broken/"):
			fmt.Fprint(w, `{"items":[{"metadata":{"name":"a"}},`)
		case strings.Contains(r.URL.Path, "/proxyerror/"):
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, "upstream shard unavailable")
		case strings.HasSuffix(r.URL.Path, "/namespaces/default/virtualmachines"):
			fmt.Fprint(w, `{"kind":"VirtualMachineList","apiVersion":"compute.io/v1","metadata":{"resourceVersion":"7"},
				"items":[{"metadata":{"name":"a"}} , {"metadata":{"name":"b","labels":{"x":"[{"}}}]}`)
		case strings.HasSuffix(r.URL.Path, "/apis/compute.io/v1/virtualmachines"):
			fmt.Fprint(w, `{"items":null,"kind":"VirtualMachineList"}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, "404 page not found")
		}
	}))
	defer srv.Close()
	r, err := NewClient(&rest.Config{}, srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	list := func(cluster, namespace string, gvr schema.GroupVersionResource, params url.Values, visit func([]byte) error) (string, error) {
		return r.List(ctx, ResourcePath(lc(cluster), gvr, namespace), params, visit)
	}
	last := func() *url.URL {
		lock.Lock()
		defer lock.Unlock()
		return requests[len(requests)-1]
	}

	var names []string
	rv, err := list("c1", "default", vms, url.Values{"fieldSelector": {"metadata.name=a"}, "x": {"1", "2"}}, func(obj []byte) error {
		names = append(names, string(obj))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`{"metadata":{"name":"a"}}`, `{"metadata":{"name":"b","labels":{"x":"[{"}}}`}; strings.Join(names, "|") != strings.Join(want, "|") || rv != "7" {
		t.Errorf("items = %v, resourceVersion %q; want %v, 7", names, rv, want)
	}
	if u := last(); u.Path != "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines" ||
		u.Query().Get("fieldSelector") != "metadata.name=a" || strings.Join(u.Query()["x"], ",") != "1,2" {
		t.Errorf("request = %s", u)
	}

	if _, err := list("c1", "", vms, nil, func([]byte) error { t.Error("visited an item of a null list"); return nil }); err != nil {
		t.Errorf("null items: %v", err)
	}
	if _, err := list("c1", "", vms.GroupResource().WithVersion("v2"), nil, func([]byte) error { return nil }); !apierrors.IsNotFound(err) {
		t.Errorf("404 without a Status body: %v, want NotFound", err)
	}
	if _, err := list("forbidden", "", vms, nil, func([]byte) error { return nil }); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot list") {
		t.Errorf("403: %v", err)
	}
	if _, err := list("broken", "", vms, nil, func([]byte) error { return nil }); err == nil {
		t.Error("truncated list: no error")
	}
	if _, err := list("proxyerror", "", vms, nil, func([]byte) error { return nil }); err == nil || !strings.Contains(err.Error(), "upstream shard unavailable") {
		t.Errorf("502: %v", err)
	}
	stop := errors.New("stop")
	if _, err := list("c1", "default", vms, nil, func([]byte) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("visit error not returned: %v", err)
	}

	// Get returns the body of a single object, and API errors as such.
	body, err := r.Get(ctx, append(ResourcePath(lc("c1"), vms, "default"), "a"), url.Values{"resourceVersion": {"0"}})
	if err == nil {
		Drain(body)
		t.Error("Get of a missing object: no error")
	} else if !apierrors.IsNotFound(err) {
		t.Errorf("Get of a missing object: %v, want NotFound", err)
	}
	if u := last(); u.Path != "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines/a" || u.Query().Get("resourceVersion") != "0" {
		t.Errorf("request = %s", u)
	}
}

func TestClientsKeepOneClientPerServer(t *testing.T) {
	rs := NewClients(&rest.Config{})
	a1, err := rs.For("https://shard-1")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := rs.For("https://shard-1")
	b, _ := rs.For("https://shard-2")
	if a1 != a2 || a1 == b {
		t.Errorf("For() returned %p, %p for one server and %p for another", a1, a2, b)
	}
	if _, err := rs.For("://no-scheme"); err == nil {
		t.Error("For() accepted a URL without a scheme")
	}
}

// A refused PATCH returns the server's Status, with its message: a
// webhook's denial says why.
func TestClientPatchErrorsCarryTheStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/denied"):
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"admission webhook \"x\" denied the request: no","reason":"Forbidden","code":403}`)
		case strings.HasSuffix(r.URL.Path, "/conflict"):
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the object has been modified","reason":"Conflict","code":409}`)
		default:
			fmt.Fprint(w, `{"metadata":{"name":"vm-1"}}`)
		}
	}))
	defer srv.Close()
	c, err := NewClient(&rest.Config{}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	base := ResourcePath(lc("c1"), vms, "default")
	if _, err := c.Patch(context.Background(), append(base, "denied"), "application/merge-patch+json", []byte(`{}`)); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `denied the request: no`) {
		t.Errorf("denied: %v", err)
	}
	if _, err := c.Patch(context.Background(), append(base, "conflict"), "application/merge-patch+json", []byte(`{}`)); !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "has been modified") {
		t.Errorf("conflict: %v", err)
	}
	raw, err := c.Patch(context.Background(), append(base, "vm-1"), "application/merge-patch+json", []byte(`{}`))
	if err != nil || !strings.Contains(string(raw), "vm-1") {
		t.Errorf("patched: %s, %v", raw, err)
	}
}
