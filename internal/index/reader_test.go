package index

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

var vms = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}

func TestReaderStreamsLists(t *testing.T) {
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
			fmt.Fprint(w, "404 page not found")
		}
	}))
	defer srv.Close()
	r, err := newReader(&rest.Config{}, srv.URL+"/")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	list := func(cluster, namespace string, gvr schema.GroupVersionResource, visit func([]byte) error) (string, error) {
		return r.list(ctx, resourcePath(lc(cluster), gvr, namespace), nil, visit)
	}

	var names []string
	rv, err := list("c1", "default", vms, func(obj []byte) error {
		names = append(names, string(obj))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`{"metadata":{"name":"a"}}`, `{"metadata":{"name":"b","labels":{"x":"[{"}}}`}; strings.Join(names, "|") != strings.Join(want, "|") || rv != "7" {
		t.Errorf("items = %v, resourceVersion %q; want %v, 7", names, rv, want)
	}
	if paths[0] != "/clusters/c1/apis/compute.io/v1/namespaces/default/virtualmachines" {
		t.Errorf("path = %s", paths[0])
	}

	if _, err := list("c1", "", vms, func([]byte) error { t.Error("visited an item of a null list"); return nil }); err != nil {
		t.Errorf("null items: %v", err)
	}
	if _, err := list("c1", "", vms.GroupResource().WithVersion("v2"), func([]byte) error { return nil }); !apierrors.IsNotFound(err) {
		t.Errorf("404 without a Status body: %v, want NotFound", err)
	}
	if _, err := list("forbidden", "", vms, func([]byte) error { return nil }); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot list") {
		t.Errorf("403: %v", err)
	}
	if _, err := list("broken", "", vms, func([]byte) error { return nil }); err == nil {
		t.Error("truncated list: no error")
	}
	if _, err := list("proxyerror", "", vms, func([]byte) error { return nil }); err == nil || !strings.Contains(err.Error(), "upstream shard unavailable") {
		t.Errorf("502: %v", err)
	}
	stop := errors.New("stop")
	if _, err := list("c1", "default", vms, func([]byte) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("visit error not returned: %v", err)
	}
}

func TestDecodeObject(t *testing.T) {
	paths := []fieldpath.Path{fieldpath.MustParse(".spec.vpcRef.name"), fieldpath.MustParse(".spec.nics[*].vpc")}
	raw := `{"apiVersion":"compute.io/v1","kind":"VirtualMachine","metadata":{"name":"vm-1","namespace":"default","uid":"u-1",
		"resourceVersion":"42","deletionTimestamp":"2026-01-01T00:00:00Z","labels":{"a":"b"},
		"annotations":{"kcp.io/cluster":"c1","other":"x"},"managedFields":[{"manager":"m"}]},
		"spec":{"vpcRef":{"name":"vpc-a"},"nics":[{"vpc":"vpc-b"},{"vpc":"vpc-c"},{"subnet":"s"}],"big":"` + strings.Repeat("x", 1000) + `"}}`
	o, err := decodeObject([]byte(raw), paths)
	if err != nil {
		t.Fatal(err)
	}
	want := &object{
		ObjectMeta: metav1.ObjectMeta{
			Name: "vm-1", Namespace: "default", UID: "u-1", ResourceVersion: "42",
			DeletionTimestamp: &metav1.Time{},
		},
		Cluster: "c1",
		Values:  [][]string{{"vpc-a"}, {"vpc-b", "vpc-c"}},
	}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("decodeObject() =\n  %+v\nwant only the metadata the index needs and the values at the paths:\n  %+v", o, want)
	}

	if _, err := decodeObject([]byte(`{"metadata":{"name":1}}`), nil); err == nil {
		t.Error("a name that is not a string was accepted")
	}
	if _, err := decodeObject([]byte(`{"metadata":{"name":"x"},"spec":{"vpcRef":{"name":"a\q"}}}`), paths); err == nil {
		t.Error("malformed JSON at a path was accepted")
	}
	// A bookmark carries only a resourceVersion.
	o, err = decodeObject([]byte(`{"kind":"VirtualMachine","metadata":{"resourceVersion":"77"}}`), paths)
	if err != nil || o.ResourceVersion != "77" {
		t.Errorf("bookmark: %+v, %v", o, err)
	}
}

func TestEventDecoder(t *testing.T) {
	paths := []fieldpath.Path{fieldpath.MustParse(".spec.vpc")}
	stream := `{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5","annotations":{"kcp.io/cluster":"c1"}},"spec":{"vpc":"v"}}}
{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old"}}
`
	var errs []error
	d := &eventDecoder{body: io.NopCloser(strings.NewReader(stream)), paths: paths, onError: func(err error) { errs = append(errs, err) }}
	d.dec = jsonDecoder(d.body)

	typ, obj, err := d.Decode()
	if err != nil || typ != watch.Added || obj.(*object).Values[0][0] != "v" || obj.(*object).Cluster != "c1" {
		t.Errorf("first event: %v %+v %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	if err != nil || typ != watch.Bookmark || obj.(*object).ResourceVersion != "9" {
		t.Errorf("bookmark: %v %+v %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	if err != nil || typ != watch.Error || obj.(*metav1.Status).Code != 410 || len(errs) != 1 || !apierrors.IsResourceExpired(errs[0]) {
		t.Errorf("error event: %v %+v %v, reported %v", typ, obj, err, errs)
	}
	if _, _, err := d.Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("end of stream: %v", err)
	}
	d.Close()
}

func lc(s string) logicalcluster.Path { return logicalcluster.NewPath(s) }

func jsonDecoder(r io.Reader) *json.Decoder { return json.NewDecoder(r) }

// A watch whose stream breaks (the reflector stopped it, or the connection
// failed) ends with an error event, not a crash.
func TestWatchStreamThatBreaks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}}`+"\n"+`!not json`)
	}))
	defer srv.Close()
	r, err := newReader(&rest.Config{}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var reported []error
	lw := &listWatch{reader: r, gvr: vms, onError: func(err error) { reported = append(reported, err) }}
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	var types []watch.EventType
	for ev := range w.ResultChan() {
		types = append(types, ev.Type)
	}
	if !reflect.DeepEqual(types, []watch.EventType{watch.Added, watch.Error}) || len(reported) != 1 {
		t.Errorf("events %v, reported %v; want ADDED, ERROR and one reported error", types, reported)
	}
}
