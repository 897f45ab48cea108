package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

var vpcs = index.Source{
	Export:   kcp.ObjectKey{Cluster: "provider", Name: "network"},
	Resource: schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"},
}

// object is a stored object of the fake index.
type object struct {
	uid, rv    string
	requested  bool
	policy     string
	referenced bool
	// deleteErr is what the next DELETE answers (then nil).
	deleteErr error
}

// fakeIndex stores VPCs of one consumer by name.
type fakeIndex struct {
	lock    sync.Mutex
	objects map[string]*object
	deletes []string
	// lookups counts the live reads of each object.
	lookups map[string]int
	updates chan struct{}
}

func newFakeIndex() *fakeIndex {
	return &fakeIndex{objects: map[string]*object{}, lookups: map[string]int{}, updates: make(chan struct{}, 1)}
}

func (f *fakeIndex) set(name string, o *object) {
	f.lock.Lock()
	defer f.lock.Unlock()
	f.objects[name] = o
}

func (f *fakeIndex) update(name string, change func(o *object)) {
	f.lock.Lock()
	change(f.objects[name])
	f.lock.Unlock()
	select {
	case f.updates <- struct{}{}:
	default:
	}
}

func (f *fakeIndex) List(_ context.Context, src index.Source, selector string, visit func([]byte) error) error {
	if src != vpcs || selector != depv1alpha1.LabelDeletionRequested {
		return fmt.Errorf("unexpected list of %s with %q", src, selector)
	}
	f.lock.Lock()
	defer f.lock.Unlock()
	for name, o := range f.objects {
		if !o.requested {
			continue
		}
		req, _ := json.Marshal(depv1alpha1.DeletionRequest{User: "alice", PropagationPolicy: (*metav1.DeletionPropagation)(&o.policy)})
		raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"name": name, "namespace": "default", "uid": o.uid, "resourceVersion": o.rv,
			"labels":      map[string]string{depv1alpha1.LabelDeletionRequested: "true"},
			"annotations": map[string]string{logicalcluster.AnnotationKey: "consumer", depv1alpha1.AnnotationDeletionRequest: string(req)},
		}})
		if err := visit(raw); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeIndex) Lookup(_ context.Context, _ index.Source, cluster logicalcluster.Name, namespace, name string) ([]kcp.Meta, error) {
	f.lock.Lock()
	defer f.lock.Unlock()
	f.lookups[name]++
	o, ok := f.objects[name]
	if !ok {
		return nil, nil
	}
	return []kcp.Meta{{Cluster: cluster, Namespace: namespace, Name: name, UID: types.UID(o.uid), ResourceVersion: o.rv, DeletionRequested: o.requested}}, nil
}

func (f *fakeIndex) Delete(_ context.Context, _ index.Source, _ logicalcluster.Name, _, name string, opts metav1.DeleteOptions) error {
	f.lock.Lock()
	defer f.lock.Unlock()
	o, ok := f.objects[name]
	if !ok {
		return apierrors.NewNotFound(vpcs.Resource.GroupResource(), name)
	}
	if err := o.deleteErr; err != nil {
		o.deleteErr = nil
		return err
	}
	if *opts.Preconditions.UID != types.UID(o.uid) || *opts.Preconditions.ResourceVersion != o.rv {
		return apierrors.NewConflict(vpcs.Resource.GroupResource(), name, fmt.Errorf("precondition failed"))
	}
	policy := ""
	if opts.PropagationPolicy != nil {
		policy = string(*opts.PropagationPolicy)
	}
	f.deletes = append(f.deletes, name+" "+policy)
	delete(f.objects, name)
	return nil
}

func (f *fakeIndex) Updates() <-chan struct{} { return f.updates }

// Referenced implements References from the objects' referenced field.
func (f *fakeIndex) Referenced(_ index.Source, obj kcp.Meta) bool {
	f.lock.Lock()
	defer f.lock.Unlock()
	o, ok := f.objects[obj.Name]
	return ok && o.referenced
}

func (f *fakeIndex) deleted() []string {
	f.lock.Lock()
	defer f.lock.Unlock()
	return append([]string(nil), f.deletes...)
}

func (f *fakeIndex) has(name string) bool {
	f.lock.Lock()
	defer f.lock.Unlock()
	_, ok := f.objects[name]
	return ok
}

type targets []index.Source

func (t targets) ReplayTargets() []index.Source { return t }

// results counts the results the replayer reports.
type results struct {
	lock sync.Mutex
	n    map[string]int
}

func (r *results) add(result string) {
	r.lock.Lock()
	defer r.lock.Unlock()
	r.n[result]++
}

func (r *results) get(result string) int {
	r.lock.Lock()
	defer r.lock.Unlock()
	return r.n[result]
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReplayer(t *testing.T) {
	ix := newFakeIndex()
	ix.set("free", &object{uid: "u1", rv: "1", requested: true, policy: "Foreground"})
	ix.set("referenced", &object{uid: "u2", rv: "1", requested: true, referenced: true})
	ix.set("not-requested", &object{uid: "u3", rv: "1"})
	ix.set("changes", &object{uid: "u4", rv: "1", requested: true, referenced: true})
	ix.set("refused-once", &object{uid: "u5", rv: "1", requested: true,
		deleteErr: apierrors.NewForbidden(vpcs.Resource.GroupResource(), "refused-once", fmt.Errorf("still referenced"))})
	ix.set("cancelled", &object{uid: "u6", rv: "1", requested: true, referenced: true})

	res := &results{n: map[string]int{}}
	r := New(targets{vpcs}, ix, ix, Options{Interval: time.Hour, Workers: 2, OnResult: res.add})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Start(ctx); err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	defer func() {
		cancel()
		<-done
	}()

	// An unreferenced recorded object is deleted with the policy of its
	// request; one that was refused is tried again.
	eventually(t, "free and refused-once to be deleted", func() bool { return !ix.has("free") && !ix.has("refused-once") })
	if res.get(ResultRefused) < 1 {
		t.Errorf("the refusal was not reported: %v", res.n)
	}

	// A deletion recorded just after a listing, with the index changing
	// once, is found by the listing the change asks for, well before the
	// interval (an hour here).
	ix.update("free", func(*object) {}) // a change: the next listing is due
	ix.set("late", &object{uid: "u7", rv: "1", requested: true})
	ix.update("late", func(*object) {})
	eventually(t, "late to be deleted within the time of two listings", func() bool { return !ix.has("late") })

	// The index reports the last reference to "changes" gone, while it
	// changed: the first DELETE fails its precondition and the object is
	// read again.
	ix.update("changes", func(o *object) {
		o.referenced = false
		o.deleteErr = apierrors.NewConflict(vpcs.Resource.GroupResource(), "changes", fmt.Errorf("changed"))
	})
	eventually(t, "changes to be deleted", func() bool { return !ix.has("changes") })

	// The label removed, then the last reference gone: nothing is deleted.
	ix.update("cancelled", func(o *object) { o.requested, o.rv = false, "2" })
	ix.update("cancelled", func(o *object) { o.referenced = false })
	time.Sleep(minRelist + 500*time.Millisecond) // a relist after the update
	ix.update("cancelled", func(*object) {})
	time.Sleep(500 * time.Millisecond)
	if !ix.has("cancelled") || !ix.has("not-requested") || !ix.has("referenced") {
		t.Errorf("deleted what it must not: %v", ix.deleted())
	}
	// What the listing saw is deleted without reading it again; only an
	// object that changed since is read.
	ix.lock.Lock()
	if n := ix.lookups["free"] + ix.lookups["late"] + ix.lookups["refused-once"]; n != 0 {
		t.Errorf("read %d objects that had not changed since they were listed: %v", n, ix.lookups)
	}
	if n := ix.lookups["changes"]; n != 1 {
		t.Errorf("read the object that changed %d times, want 1", n)
	}
	ix.lock.Unlock()
	want := map[string]bool{"free Foreground": true, "refused-once ": true, "changes ": true, "late ": true}
	got := ix.deleted()
	if len(got) != len(want) {
		t.Errorf("deleted %v, want %v", got, want)
	}
	for _, d := range got {
		if !want[d] {
			t.Errorf("unexpected deletion %q", d)
		}
	}
}

func TestRecorder(t *testing.T) {
	var gotBody []byte
	var gotType types.PatchType
	p := patcherFunc(func(_ context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) error {
		if src != vpcs || cluster != "consumer" || namespace != "default" || name != "vpc-a" {
			t.Errorf("patched %s %s/%s/%s", src, cluster, namespace, name)
		}
		gotBody, gotType = body, pt
		return nil
	})
	policy := metav1.DeletePropagationOrphan
	req := depv1alpha1.DeletionRequest{User: "alice", RequestedAt: metav1.NewTime(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)), PropagationPolicy: &policy}
	obj := kcp.Meta{Cluster: "consumer", Namespace: "default", Name: "vpc-a", UID: "u-1"}
	if err := (Recorder{Patcher: p}).Record(context.Background(), vpcs, obj, req); err != nil {
		t.Fatal(err)
	}
	if gotType != types.MergePatchType {
		t.Errorf("patch type %s", gotType)
	}
	want := `{"metadata":{"annotations":{"deletion.dependencies.opendefense.cloud/request":"{\"user\":\"alice\",\"requestedAt\":\"2026-11-24T10:00:00Z\",\"propagationPolicy\":\"Orphan\"}"},"labels":{"deletion.dependencies.opendefense.cloud/requested":"true"},"uid":"u-1"}}`
	if string(gotBody) != want {
		t.Errorf("patch\n  %s\nwant\n  %s", gotBody, want)
	}

	failing := patcherFunc(func(context.Context, index.Source, logicalcluster.Name, string, string, types.PatchType, []byte) error {
		return apierrors.NewForbidden(vpcs.Resource.GroupResource(), "vpc-a", fmt.Errorf("no consent"))
	})
	if err := (Recorder{Patcher: failing}).Record(context.Background(), vpcs, obj, req); !apierrors.IsForbidden(err) {
		t.Errorf("Record's error %v does not wrap the patch's", err)
	}
}

type patcherFunc func(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) error

func (f patcherFunc) Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) error {
	return f(ctx, src, cluster, namespace, name, pt, body)
}

func TestRequest(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	for _, tt := range []struct {
		name    string
		options string
		want    *metav1.DeletionPropagation
		err     bool
	}{
		{name: "no options"},
		{name: "background", options: `{"propagationPolicy":"Background"}`, want: ptr(metav1.DeletePropagationBackground)},
		{name: "no policy", options: `{"gracePeriodSeconds":0}`},
		{name: "malformed", options: `{"propagationPolicy":`, err: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Request("alice", now, []byte(tt.options))
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if got.User != "alice" || !got.RequestedAt.Equal(&now) {
				t.Errorf("request %+v", got)
			}
			if (got.PropagationPolicy == nil) != (tt.want == nil) || got.PropagationPolicy != nil && *got.PropagationPolicy != *tt.want {
				t.Errorf("policy %v, want %v", got.PropagationPolicy, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
