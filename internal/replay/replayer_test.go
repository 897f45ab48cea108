package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/records"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
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
	// record, if set, is the record annotation as it is; otherwise the
	// keyring signs one for the object (requested a minute before now).
	record string
	// deleteErr is what the next DELETE answers (then nil).
	deleteErr error
}

// fakeIndex stores VPCs of one consumer by name.
type fakeIndex struct {
	lock    sync.Mutex
	keys    *records.Keyring
	objects map[string]*object
	deletes []string
	// removed are the objects whose record was removed, and events the
	// Events recorded, by object name.
	removed []string
	events  map[string]string
	// lookups counts the live reads of each object, and deleteCalls the
	// DELETEs sent for each.
	lookups     map[string]int
	deleteCalls map[string]int
	updates     chan struct{}
	// onList, if set, is called by the n-th List once it has read the
	// objects, before it visits them; onDelete by Delete before it looks
	// at the object.
	onList    func(n int)
	onDelete  func(name string)
	listCalls int
}

// now is the clock of the replayer tests.
var now = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func newKeyring(t *testing.T, id string) *records.Keyring {
	t.Helper()
	k, err := records.NewKeyring([]records.Key{{ID: id, Secret: []byte("0123456789abcdef0123456789abcdef-" + id)}})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newFakeIndex(t *testing.T) *fakeIndex {
	return &fakeIndex{keys: newKeyring(t, "key-1"), objects: map[string]*object{}, events: map[string]string{}, lookups: map[string]int{}, deleteCalls: map[string]int{}, updates: make(chan struct{}, 1)}
}

// recordOf returns the record annotation of an object (the lock is held).
func (f *fakeIndex) recordOf(name string, o *object) string {
	if o.record != "" {
		return o.record
	}
	req := depv1alpha1.DeletionRequest{User: "alice", RequestedAt: metav1.NewTime(now.Add(-time.Minute))}
	if o.policy != "" {
		req.PropagationPolicy = (*metav1.DeletionPropagation)(&o.policy)
	}
	a, err := f.keys.Encode(records.Subject{Cluster: "consumer", Resource: vpcs.Resource.GroupResource(), Namespace: "default", Name: name, UID: types.UID(o.uid)}, req)
	if err != nil {
		panic(err)
	}
	return a
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

func (f *fakeIndex) List(_ context.Context, src index.Source, selector string, visit func(kcp.Meta) error) error {
	if src != vpcs || selector != depv1alpha1.LabelDeletionRequested {
		return fmt.Errorf("unexpected list of %s with %q", src, selector)
	}
	f.lock.Lock()
	var listed []kcp.Meta
	for name, o := range f.objects {
		if !o.requested {
			continue
		}
		raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"name": name, "namespace": "default", "uid": o.uid, "resourceVersion": o.rv,
			"labels":      map[string]string{depv1alpha1.LabelDeletionRequested: "true"},
			"annotations": map[string]string{logicalcluster.AnnotationKey: "consumer", depv1alpha1.AnnotationDeletionRequest: f.recordOf(name, o)},
		}})
		m, err := kcp.ReadMeta(raw)
		if err != nil {
			f.lock.Unlock()
			return err
		}
		listed = append(listed, m)
	}
	f.listCalls++
	n, onList := f.listCalls, f.onList
	f.lock.Unlock()
	if onList != nil {
		onList(n)
	}
	for _, m := range listed {
		if err := visit(m); err != nil {
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
	m := kcp.Meta{Cluster: cluster, Namespace: namespace, Name: name, UID: types.UID(o.uid), ResourceVersion: o.rv, DeletionRequested: o.requested}
	if o.requested {
		m.DeletionRecord = f.recordOf(name, o)
	}
	return []kcp.Meta{m}, nil
}

// Patch removes the record of an object whose UID and resourceVersion are
// those of the patch; the only patch the replayer sends.
func (f *fakeIndex) Patch(_ context.Context, src index.Source, _ logicalcluster.Name, _, name string, pt types.PatchType, body []byte) ([]byte, error) {
	f.lock.Lock()
	defer f.lock.Unlock()
	var patch struct {
		Metadata struct {
			UID             string             `json:"uid"`
			ResourceVersion string             `json:"resourceVersion"`
			Labels          map[string]*string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &patch); err != nil || pt != types.MergePatchType || src != vpcs {
		return nil, fmt.Errorf("unexpected patch %s of %s: %s", pt, src, body)
	}
	o, ok := f.objects[name]
	if !ok {
		return nil, apierrors.NewNotFound(vpcs.Resource.GroupResource(), name)
	}
	if patch.Metadata.UID != o.uid || patch.Metadata.ResourceVersion != o.rv {
		return nil, apierrors.NewConflict(vpcs.Resource.GroupResource(), name, fmt.Errorf("precondition failed"))
	}
	if v, ok := patch.Metadata.Labels[depv1alpha1.LabelDeletionRequested]; !ok || v != nil {
		return nil, fmt.Errorf("unexpected patch %s", body)
	}
	o.requested, o.record = false, ""
	f.removed = append(f.removed, name)
	return nil, nil
}

func (f *fakeIndex) State(index.Source) index.State {
	return index.State{Phase: index.PhaseSynced, Kind: "VPC"}
}

func (f *fakeIndex) Event(_ context.Context, src index.Source, kind string, obj kcp.Meta, eventType, reason, msg string) error {
	f.lock.Lock()
	defer f.lock.Unlock()
	if src != vpcs || obj.Cluster != "consumer" || obj.Namespace != "default" || kind != "VPC" || eventType != corev1.EventTypeWarning || reason != EventReasonDropped {
		return fmt.Errorf("unexpected event %s about %+v: %s %s %s %s", src, obj, kind, eventType, reason, msg)
	}
	f.events[obj.Name] = msg
	return nil
}

func (f *fakeIndex) Delete(_ context.Context, _ index.Source, _ logicalcluster.Name, _, name string, opts metav1.DeleteOptions) error {
	if f.onDelete != nil {
		f.onDelete(name)
	}
	f.lock.Lock()
	defer f.lock.Unlock()
	f.deleteCalls[name]++
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

type targets []registry.Protection

func (t targets) Protections() []registry.Protection { return t }

// replaying protects VPCs under a Replay rule.
var replaying = targets{{Target: registry.Target{Cluster: vpcs.Export.Cluster, Resource: vpcs.Resource.GroupResource()}, Source: vpcs, Replay: true}}

// results returns how often vec counted label.
func results(vec *prometheus.CounterVec, label string) int {
	return int(testutil.ToFloat64(vec.WithLabelValues(label)))
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

// newRecords returns the Records of the replayer tests.
func newRecords(ix *fakeIndex, keyring *records.Keyring) *Records {
	return &Records{Patcher: ix, Keys: records.StaticKeys(keyring), Now: func() time.Time { return now }}
}

// run starts r and returns a function that stops it and waits until it
// has stopped.
func run(t *testing.T, r *Replayer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Start(ctx); err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func TestReplayer(t *testing.T) {
	ix := newFakeIndex(t)
	ix.set("free", &object{uid: "u1", rv: "1", requested: true, policy: "Foreground"})
	ix.set("referenced", &object{uid: "u2", rv: "1", requested: true, referenced: true})
	ix.set("not-requested", &object{uid: "u3", rv: "1"})
	ix.set("changes", &object{uid: "u4", rv: "1", requested: true, referenced: true})
	ix.set("refused-once", &object{uid: "u5", rv: "1", requested: true,
		deleteErr: apierrors.NewForbidden(vpcs.Resource.GroupResource(), "refused-once", fmt.Errorf("still referenced"))})
	ix.set("cancelled", &object{uid: "u6", rv: "1", requested: true, referenced: true})

	m := NewMetrics()
	r := New(replaying, ix, ix, newRecords(ix, ix.keys), ix, Options{Interval: time.Hour, Workers: 2, Metrics: m})
	defer run(t, r)()

	// An unreferenced recorded object is deleted with the policy of its
	// request; one that was refused is tried again.
	eventually(t, "free and refused-once to be deleted", func() bool { return !ix.has("free") && !ix.has("refused-once") })
	if results(m.replays, ResultRefused) < 1 {
		t.Errorf("the refusal was not counted")
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

func TestRecord(t *testing.T) {
	var gotBody []byte
	var gotType types.PatchType
	p := patcherFunc(func(_ context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) error {
		if src != vpcs || cluster != "consumer" || namespace != "default" || name != "vpc-a" {
			t.Errorf("patched %s %s/%s/%s", src, cluster, namespace, name)
		}
		gotBody, gotType = body, pt
		return nil
	})
	keyring := newKeyring(t, "key-1")
	rs := &Records{Patcher: p, Keys: records.StaticKeys(keyring), Now: func() time.Time { return now }}
	policy := metav1.DeletePropagationOrphan
	req := depv1alpha1.DeletionRequest{User: "alice", RequestedAt: metav1.NewTime(now), PropagationPolicy: &policy}
	obj := kcp.Meta{Cluster: "consumer", Namespace: "default", Name: "vpc-a", UID: "u-1", ResourceVersion: "7"}
	if err := rs.Record(context.Background(), vpcs, obj, req); err != nil {
		t.Fatal(err)
	}
	if gotType != types.MergePatchType {
		t.Errorf("patch type %s", gotType)
	}
	var patch struct {
		Metadata struct {
			UID             string            `json:"uid"`
			ResourceVersion string            `json:"resourceVersion"`
			Labels          map[string]string `json:"labels"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(gotBody, &patch); err != nil {
		t.Fatal(err)
	}
	if patch.Metadata.UID != "u-1" || patch.Metadata.ResourceVersion != "7" || patch.Metadata.Labels[depv1alpha1.LabelDeletionRequested] != "true" {
		t.Errorf("patch %s: want the UID and resourceVersion as preconditions and the label", gotBody)
	}
	// What was written verifies for exactly that object.
	obj.DeletionRequested, obj.DeletionRecord = true, patch.Metadata.Annotations[depv1alpha1.AnnotationDeletionRequest]
	if err := rs.Verify(vpcs.Resource.GroupResource(), obj); err != nil {
		t.Errorf("the record does not verify: %v", err)
	}
	recreated := obj
	recreated.UID = "u-2"
	if err := rs.Verify(vpcs.Resource.GroupResource(), recreated); records.ProblemOf(err) != records.ProblemWrongObject {
		t.Errorf("the record verifies on a recreated object: %v", err)
	}
	if err := rs.Verify(schema.GroupResource{Group: "network.io", Resource: "subnets"}, obj); records.ProblemOf(err) != records.ProblemBadSignature {
		t.Errorf("the record verifies on an object of another resource: %v", err)
	}
	later := &Records{Patcher: p, Keys: records.StaticKeys(keyring), Now: func() time.Time { return now.Add(DefaultTTL + time.Second) }}
	if err := later.Verify(vpcs.Resource.GroupResource(), obj); records.ProblemOf(err) != records.ProblemExpired {
		t.Errorf("the record verifies after the TTL: %v", err)
	}
	unlabelled := obj
	unlabelled.DeletionRequested = false
	if err := rs.Verify(vpcs.Resource.GroupResource(), unlabelled); err == nil {
		t.Error("a record without the label verifies")
	}

	// Nothing is recorded for an object without a UID or resourceVersion
	// (a forged review need not carry them).
	gotBody = nil
	if err := rs.Record(context.Background(), vpcs, kcp.Meta{Cluster: "consumer", Namespace: "default", Name: "vpc-a"}, req); err == nil || gotBody != nil {
		t.Errorf("recorded on an object without UID and resourceVersion: %v, %s", err, gotBody)
	}

	failing := patcherFunc(func(context.Context, index.Source, logicalcluster.Name, string, string, types.PatchType, []byte) error {
		return apierrors.NewForbidden(vpcs.Resource.GroupResource(), "vpc-a", fmt.Errorf("no consent"))
	})
	if err := (&Records{Patcher: failing, Keys: records.StaticKeys(keyring)}).Record(context.Background(), vpcs, obj, req); !apierrors.IsForbidden(err) {
		t.Errorf("Record's error %v does not wrap the patch's", err)
	}
}

// Records that do not verify, have expired, or that no Replay rule covers
// are removed without deleting anything, with an Event; the others are
// replayed.
func TestReplayerRemovesRecordsItDoesNotReplay(t *testing.T) {
	ix := newFakeIndex(t)
	other, err := records.NewKeyring([]records.Key{{ID: "key-1", Secret: []byte("another secret of at least thirty-two bytes")}}) // the same key ID
	if err != nil {
		t.Fatal(err)
	}
	otherRecord, err := other.Encode(records.Subject{Cluster: "consumer", Resource: vpcs.Resource.GroupResource(), Namespace: "default", Name: "forged", UID: "u2"},
		depv1alpha1.DeletionRequest{User: "mallory", RequestedAt: metav1.NewTime(now)})
	if err != nil {
		t.Fatal(err)
	}
	ix.set("valid", &object{uid: "u1", rv: "1", requested: true})
	ix.set("forged", &object{uid: "u2", rv: "1", requested: true, record: otherRecord})
	ix.set("unsigned", &object{uid: "u3", rv: "1", requested: true, record: `{"user":"alice","requestedAt":"2026-11-24T09:00:00Z"}`})
	ix.set("no-record", &object{uid: "u4", rv: "1", requested: true, record: "-"})
	// Signed with keys this replica does not hold: an older one, rotated
	// out (removed), and a newer one that another replica read first
	// during a rotation (left alone until this one reads it too).
	for name, id := range map[string]string{"retired-key": "key-0", "newer-key": "key-2"} {
		k := newKeyring(t, id)
		a, err := k.Encode(records.Subject{Cluster: "consumer", Resource: vpcs.Resource.GroupResource(), Namespace: "default", Name: name, UID: types.UID("u-" + name)},
			depv1alpha1.DeletionRequest{User: "alice", RequestedAt: metav1.NewTime(now)})
		if err != nil {
			t.Fatal(err)
		}
		ix.set(name, &object{uid: "u-" + name, rv: "1", requested: true, record: a})
	}
	ix.set("carried", &object{uid: "u5", rv: "1", requested: true})
	ix.set("expired", &object{uid: "u6", rv: "1", requested: true})
	ix.lock.Lock()
	ix.objects["carried"].record = ix.recordOf("carried", &object{uid: "u-earlier"})
	ix.objects["expired"].record, err = ix.keys.Encode(records.Subject{Cluster: "consumer", Resource: vpcs.Resource.GroupResource(), Namespace: "default", Name: "expired", UID: "u6"},
		depv1alpha1.DeletionRequest{User: "alice", RequestedAt: metav1.NewTime(now.Add(-DefaultTTL - time.Minute))})
	ix.lock.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	r := New(replaying, ix, ix, newRecords(ix, ix.keys), ix, Options{Interval: time.Hour, Metrics: m})
	r.list(context.Background())

	ix.lock.Lock()
	gotRemoved := slices.Sorted(slices.Values(ix.removed))
	events := maps.Clone(ix.events)
	ix.lock.Unlock()
	if want := []string{"carried", "expired", "forged", "no-record", "retired-key", "unsigned"}; !slices.Equal(gotRemoved, want) {
		t.Errorf("removed the records of %v, want %v", gotRemoved, want)
	}
	for name, problem := range map[string]string{"carried": "written for the object with UID u-earlier", "expired": "expired", "forged": "does not match", "unsigned": "not signed"} {
		if !strings.Contains(events[name], problem) {
			t.Errorf("the Event on %s says %q, want it to say %q", name, events[name], problem)
		}
	}
	for reason, n := range map[string]int{string(records.ProblemWrongObject): 1, string(records.ProblemExpired): 1, string(records.ProblemBadSignature): 1, string(records.ProblemMalformed): 2, string(records.ProblemUnknownKey): 1} {
		if results(m.removals, reason) != n {
			t.Errorf("removals for %s: %d, want %d", reason, results(m.removals, reason), n)
		}
	}
	r.lock.Lock()
	pending := slices.Collect(maps.Keys(r.pending))
	r.lock.Unlock()
	if len(pending) != 1 || pending[0].name != "valid" {
		t.Errorf("pending %v, want only the valid record", pending)
	}
	if !ix.has("newer-key") {
		t.Error("the object with a record of a newer key was deleted")
	}
	if d := ix.deleted(); len(d) != 0 {
		t.Errorf("deleted %v while listing", d)
	}

	// A rule that stops deferring deletions: its records go.
	r = New(targets{{Target: replaying[0].Target, Source: vpcs}}, ix, ix, newRecords(ix, ix.keys), ix, Options{Interval: time.Hour, Metrics: m})
	r.list(context.Background())
	if results(m.removals, RemovedUncovered) != 1 || ix.has("valid") && !strings.Contains(ix.events["valid"], "Replay") {
		t.Errorf("the record no Replay rule covers was not removed with an Event: %d, %q", results(m.removals, RemovedUncovered), ix.events["valid"])
	}
}

type patcherFunc func(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) error

func (f patcherFunc) Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) ([]byte, error) {
	return nil, f(ctx, src, cluster, namespace, name, pt, body)
}

// A listing that kcp served before a replay deleted its object, and that
// the Replayer reads after the replay finished, does not bring the
// deletion back: nothing sends a second DELETE to find the object gone.
func TestReplayerListingDoesNotBringBackAFinishedDeletion(t *testing.T) {
	ix := newFakeIndex(t)
	ix.set("racing", &object{uid: "u1", rv: "1", requested: true})
	m := NewMetrics()
	listed := make(chan struct{})
	// The first replay of "racing" waits until the second listing has
	// read the objects; that listing goes on only once the replay has
	// finished (its result counted).
	ix.onDelete = func(string) { <-listed }
	ix.onList = func(n int) {
		if n != 2 {
			return
		}
		close(listed)
		deadline := time.Now().Add(10 * time.Second)
		for results(m.replays, ResultDeleted) < 1 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	r := New(replaying, ix, ix, newRecords(ix, ix.keys), ix, Options{Interval: time.Hour, Workers: 2, Metrics: m})
	defer run(t, r)()

	// A change of the index asks for the second listing.
	ix.update("racing", func(*object) {})
	eventually(t, "the second listing", func() bool {
		ix.lock.Lock()
		defer ix.lock.Unlock()
		return ix.listCalls >= 2
	})
	eventually(t, "racing to be deleted", func() bool { return !ix.has("racing") })
	// Time for the replay of a deletion the listing brought back.
	time.Sleep(500 * time.Millisecond)
	ix.lock.Lock()
	calls := ix.deleteCalls["racing"]
	ix.lock.Unlock()
	if calls != 1 || results(m.replays, ResultDeleted) != 1 {
		t.Errorf("sent %d DELETEs of racing and counted %d deleted, want 1 and 1", calls, results(m.replays, ResultDeleted))
	}
}
