package dependents

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	vms  = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
	vpcs = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}
)

func TestHTTPListerStreamsItems(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
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
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		}
	}))
	defer srv.Close()
	l := NewHTTPLister(srv.URL+"/", srv.Client())
	ctx := context.Background()

	var names []string
	err := l.List(ctx, "c1", vms, "default", func(obj []byte) error {
		names = append(names, string(obj))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`{"metadata":{"name":"a"}}`, `{"metadata":{"name":"b","labels":{"x":"[{"}}}`}; strings.Join(names, "|") != strings.Join(want, "|") {
		t.Errorf("items = %v, want %v", names, want)
	}
	if paths[0] != "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines" {
		t.Errorf("path = %s", paths[0])
	}

	if err := l.List(ctx, "c1", vms, "", func([]byte) error { t.Error("visited an item of a null list"); return nil }); err != nil {
		t.Errorf("null items: %v", err)
	}
	if err := l.List(ctx, "c1", vpcs, "", func([]byte) error { return nil }); !errors.Is(err, ErrNotServed) || !apierrors.IsNotFound(err) {
		t.Errorf("404: %v, want ErrNotServed and NotFound", err)
	}
	if err := l.List(ctx, "forbidden", vms, "", func([]byte) error { return nil }); !apierrors.IsForbidden(err) || errors.Is(err, ErrNotServed) || !strings.Contains(err.Error(), "cannot list") {
		t.Errorf("403: %v", err)
	}
	if err := l.List(ctx, "broken", vms, "", func([]byte) error { return nil }); err == nil {
		t.Error("truncated list: no error")
	}
	if err := l.List(ctx, "proxyerror", vms, "", func([]byte) error { return nil }); err == nil || !strings.Contains(err.Error(), "upstream shard unavailable") {
		t.Errorf("502: %v", err)
	}
	stop := errors.New("stop")
	if err := l.List(ctx, "c1", vms, "default", func([]byte) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("visit error not returned: %v", err)
	}
}
