package sources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

var vms = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}

func TestEventDecoder(t *testing.T) {
	paths := []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}
	stream := `{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5","annotations":{"kcp.io/cluster":"c1"}},"spec":{"vpc":"v"}}}
{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"6","deletionTimestamp":"2026-01-01T00:00:00Z","annotations":{"kcp.io/cluster":"c1"}},"spec":{"vpc":"w"}}}
{"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"7","labels":{"dependencies.opendefense.cloud/admission":"0123456789abcdef"},"annotations":{"kcp.io/cluster":"c1"}}}}
{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old"}}
`
	var errs []error
	body := io.NopCloser(strings.NewReader(stream))
	d := &eventDecoder{body: body, dec: json.NewDecoder(body), paths: paths, onError: func(err error) { errs = append(errs, err) }}

	typ, obj, err := d.Decode()
	if o, ok := obj.(*store.Object); err != nil || typ != watch.Added || !ok || !reflect.DeepEqual(o.Values, [][]fieldpath.Value{{{Name: "v"}}}) || o.Cluster != "c1" || o.Name != "a" || o.ResourceVersion != "5" {
		t.Errorf("first event: %v %+v %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	if o, ok := obj.(*store.Object); err != nil || typ != watch.Modified || !ok || o.Values[0][0].Name != "w" || o.DeletionTimestamp == nil || o.ResourceVersion != "6" {
		t.Errorf("modified: %v %+v %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	if o, ok := obj.(*store.Object); err != nil || typ != watch.Deleted || !ok || o.Name != "a" || o.Cluster != "c1" || o.Admission != "0123456789abcdef" {
		t.Errorf("deleted: %v %+v %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	if o, ok := obj.(*store.Object); err != nil || typ != watch.Bookmark || !ok || o.ResourceVersion != "9" {
		t.Errorf("bookmark: %v %+v %v", typ, obj, err)
	}
	if len(errs) != 0 {
		t.Errorf("errors reported before the error event: %v", errs)
	}
	typ, obj, err = d.Decode()
	if s, ok := obj.(*metav1.Status); err != nil || typ != watch.Error || !ok || s.Code != 410 || len(errs) != 1 || !apierrors.IsResourceExpired(errs[0]) {
		t.Errorf("error event: %v %+v %v, reported %v", typ, obj, err, errs)
	}
	if _, _, err := d.Decode(); !errors.Is(err, io.EOF) {
		t.Errorf("end of stream: %v", err)
	}
	if len(errs) != 1 {
		t.Errorf("the end of the stream was reported as an error: %v", errs)
	}
	d.Close()
}

// Events the decoder cannot read end the watch with an error; those that
// mean something is wrong with the data are reported.
func TestEventDecoderErrors(t *testing.T) {
	paths := []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}
	tests := []struct {
		name     string
		stream   string
		reported bool
	}{
		{"an object whose metadata is not strings", `{"type":"ADDED","object":{"metadata":{"name":1}}}`, true},
		{"malformed JSON at a path", `{"type":"ADDED","object":{"metadata":{"name":"a"},"spec":{"vpc":"a\q"}}}`, true},
		{"an event that is not JSON", `!not json`, true},
		{"a stream cut off", `{"type":"ADDED","object":{"metadata":`, true},
		{"an unknown event type", `{"type":"RENAMED","object":{"metadata":{"name":"a"}}}`, false},
		{"an error event that is not a Status", `{"type":"ERROR","object":[1]}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var errs []error
			body := io.NopCloser(strings.NewReader(tt.stream))
			d := &eventDecoder{body: body, dec: json.NewDecoder(body), paths: paths, onError: func(err error) { errs = append(errs, err) }}
			typ, obj, err := d.Decode()
			if err == nil || typ != "" || obj != nil {
				t.Errorf("Decode() = %v, %+v, %v; want an error", typ, obj, err)
			}
			if reported := len(errs) == 1 && errors.Is(errs[0], err); reported != tt.reported {
				t.Errorf("reported %v for %v, want reported: %v", errs, err, tt.reported)
			}
		})
	}
}

// A watch whose stream breaks (the reflector stopped it, or the connection
// failed) ends with an error event, not a crash.
func TestWatchStreamThatBreaks(t *testing.T) {
	var (
		lock  sync.Mutex
		query url.Values
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lock.Lock()
		query = r.URL.Query()
		lock.Unlock()
		if r.URL.Path != "/clusters/*/apis/compute.io/v1/virtualmachines" {
			t.Errorf("watch of %s", r.URL.Path)
		}
		fmt.Fprint(w, `{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}}`+"\n"+`!not json`)
	}))
	defer srv.Close()
	r, err := vw.NewClient(&rest.Config{}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var reported []error
	lw := &listWatch{client: r, gvr: vms, onError: func(err error) { reported = append(reported, err) }}
	timeout := int64(60)
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "1", AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
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
	lock.Lock()
	defer lock.Unlock()
	if query.Get("watch") != "true" || query.Get("resourceVersion") != "1" || query.Get("allowWatchBookmarks") != "true" || query.Get("timeoutSeconds") != "60" {
		t.Errorf("watch query %v", query)
	}
}

// A list of all clusters decodes what the store keeps of each object, with
// the list's resourceVersion; a failed list is reported.
func TestListWatchLists(t *testing.T) {
	var (
		lock  sync.Mutex
		query url.Values
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lock.Lock()
		query = r.URL.Query()
		lock.Unlock()
		switch r.URL.Path {
		case "/clusters/*/apis/compute.io/v1/virtualmachines":
			fmt.Fprint(w, `{"kind":"VirtualMachineList","metadata":{"resourceVersion":"12"},"items":[
				{"metadata":{"name":"a","namespace":"default","annotations":{"kcp.io/cluster":"c1"}},"spec":{"vpc":"v1"}},
				{"metadata":{"name":"b","annotations":{"kcp.io/cluster":"c2"}},"spec":{}}]}`)
		case "/clusters/*/apis/compute.io/v2/virtualmachines":
			fmt.Fprint(w, `{"items":[{"metadata":{"name":7}}]}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
		}
	}))
	defer srv.Close()
	r, err := vw.NewClient(&rest.Config{}, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var reported []error
	onError := func(err error) { reported = append(reported, err) }
	paths := []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpc")}
	lw := &listWatch{client: r, gvr: vms, paths: paths, onError: onError}
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	list := obj.(*store.ObjectList)
	if list.ResourceVersion != "12" || len(list.Items) != 2 || list.Items[0].Cluster != "c1" || list.Items[0].Namespace != "default" ||
		!reflect.DeepEqual(list.Items[0].Values, [][]fieldpath.Value{{{Name: "v1"}}}) || list.Items[1].Name != "b" || list.Items[1].Cluster != "c2" || len(list.Items[1].Values[0]) != 0 {
		t.Errorf("list = %+v", list)
	}
	lock.Lock()
	if query.Get("resourceVersion") != "0" || query.Get("resourceVersionMatch") != "NotOlderThan" {
		t.Errorf("list query %v", query)
	}
	lock.Unlock()
	if len(reported) != 0 {
		t.Errorf("a successful list reported %v", reported)
	}

	lw.gvr = vms.GroupResource().WithVersion("v2")
	if _, err := lw.ListWithContext(context.Background(), metav1.ListOptions{}); err == nil || len(reported) != 1 || !errors.Is(reported[0], err) {
		t.Errorf("a list with an object it cannot decode: %v, reported %v", err, reported)
	}
	lw.gvr = schema.GroupVersionResource{Group: "other.io", Version: "v1", Resource: "things"}
	if _, err := lw.List(metav1.ListOptions{}); !apierrors.IsForbidden(err) || len(reported) != 2 || !apierrors.IsForbidden(reported[1]) {
		t.Errorf("a refused list: %v, reported %v", err, reported)
	}
	if _, err := lw.Watch(metav1.ListOptions{}); !apierrors.IsForbidden(err) || len(reported) != 3 {
		t.Errorf("a refused watch: %v, reported %v", err, reported)
	}
	if !lw.IsWatchListSemanticsUnSupported() {
		t.Error("the reflector would ask for a watch list, which the listWatch does not decode")
	}
}

// Stopping a watch returns at once, however long kcp would keep the
// stream open.
func TestEventDecoderCloseDoesNotWaitForTheStream(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	go func() { _, _ = w.Write([]byte(`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"1"}}}`)) }()
	d := &eventDecoder{body: r, dec: json.NewDecoder(r), onError: func(error) {}}
	done := make(chan struct{})
	go func() {
		d.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the stream to end")
	}
}
