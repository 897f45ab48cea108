package clearance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

var (
	now  = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	vpcs = index.Source{Export: kcp.ObjectKey{Cluster: "provider", Name: "net.io"}, Resource: schema.GroupVersionResource{Group: "net.io", Version: "v1", Resource: "vpcs"}}
)

// vpc is a VPC as listed: created age before now, with the ledger (none
// if empty) and the extra metadata.
type vpc struct {
	name string
	// cluster is "consumer" if empty.
	cluster string
	// namespace is "default" if empty, none if "-".
	namespace string
	age       time.Duration
	ledger    string
	extra     map[string]any
	rv        string
}

func (v vpc) json() []byte {
	cluster := v.cluster
	if cluster == "" {
		cluster = "consumer"
	}
	annotations := map[string]any{logicalcluster.AnnotationKey: cluster}
	if v.ledger != "" {
		annotations[depv1alpha1.AnnotationAdmittedReferences] = v.ledger
	}
	namespace := v.namespace
	switch namespace {
	case "":
		namespace = "default"
	case "-":
		namespace = ""
	}
	meta := map[string]any{"name": v.name, "namespace": namespace, "uid": "uid-" + v.name, "resourceVersion": v.rv,
		"creationTimestamp": now.Add(-v.age).Format(time.RFC3339), "annotations": annotations}
	for k, val := range v.extra {
		meta[k] = val
	}
	raw, _ := json.Marshal(map[string]any{"metadata": meta})
	return raw
}

// fakeObjects lists vpcs, as kcp does with a label selector of the form
// key!=value, and records the patches (the ledger and the label that says
// the object is cleared they write); a patch of a VPC whose
// resourceVersion changed is a conflict.
type fakeObjects struct {
	lock      sync.Mutex
	vpcs      []vpc
	patches   map[string]string
	labels    map[string]string
	selectors []string
	changed   map[string]bool
	// scoped are the listings of one workspace, as cluster:selector;
	// those of the workspaces in failIn fail.
	scoped []string
	failIn map[logicalcluster.Name]bool
	// listing is set while a listing is under way.
	listing atomic.Bool
}

func (f *fakeObjects) ListObjects(_ context.Context, _ index.Source, selector string, keep func(kcp.Meta, []byte) bool, visit func(kcp.Meta, []byte) error) error {
	f.selectors = append(f.selectors, selector)
	return f.list("", selector, keep, visit)
}

func (f *fakeObjects) ListObjectsIn(_ context.Context, _ index.Source, cluster logicalcluster.Name, selector string, keep func(kcp.Meta, []byte) bool, visit func(kcp.Meta, []byte) error) error {
	f.scoped = append(f.scoped, cluster.String()+":"+selector)
	if f.failIn[cluster] {
		return apierrors.NewServiceUnavailable("boom")
	}
	return f.list(cluster, selector, keep, visit)
}

// list lists the VPCs of cluster (every one if empty).
func (f *fakeObjects) list(cluster logicalcluster.Name, selector string, keep func(kcp.Meta, []byte) bool, visit func(kcp.Meta, []byte) error) error {
	f.listing.Store(true)
	defer f.listing.Store(false)
	key, value, filtered := strings.Cut(selector, "!=")
	for _, v := range f.vpcs {
		raw := v.json()
		m, err := kcp.ReadMeta(raw)
		if err != nil {
			return err
		}
		if !cluster.Empty() && m.Cluster != cluster {
			continue
		}
		if labels, _ := v.extra["labels"].(map[string]any); filtered && labels[key] == value {
			continue
		}
		if !keep(m, raw) {
			raw = nil
		}
		if err := visit(m, raw); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeObjects) Patch(_ context.Context, _ index.Source, _ logicalcluster.Name, _, name string, pt types.PatchType, body []byte) ([]byte, error) {
	f.lock.Lock()
	defer f.lock.Unlock()
	if pt != types.MergePatchType {
		return nil, apierrors.NewBadRequest("not a merge patch")
	}
	if f.changed[name] {
		return nil, apierrors.NewConflict(vpcs.Resource.GroupResource(), name, nil)
	}
	var p struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Labels          map[string]string `json:"labels"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Metadata.ResourceVersion == "" {
		return nil, apierrors.NewBadRequest("no resourceVersion precondition")
	}
	if f.patches == nil {
		f.patches, f.labels = map[string]string{}, map[string]string{}
	}
	if ledger, ok := p.Metadata.Annotations[depv1alpha1.AnnotationAdmittedReferences]; ok {
		f.patches[name] = ledger
	}
	f.labels[name] = p.Metadata.Labels[depv1alpha1.LabelCleared]
	return body, nil
}

// fakeDecider clears every VPC but those it says are referenced or not
// clearable, under fingerprint, and counts its decisions.
type fakeDecider struct {
	lock        sync.Mutex
	fingerprint string
	referenced  map[string]bool
	notClear    map[string]bool
	decided     []string
	// warmed are the objects whose decision was prepared; objects, if
	// set, is asked whether a listing was under way then.
	warmed    []string
	objects   *fakeObjects
	whileList bool
	// unprepared says the preparation is not done yet (a probe under
	// way).
	unprepared bool
}

func (d *fakeDecider) Clearance(_ context.Context, provider logicalcluster.Name, resource schema.GroupVersionResource, raw []byte) (string, string) {
	m, _ := kcp.ReadMeta(raw)
	d.lock.Lock()
	defer d.lock.Unlock()
	d.decided = append(d.decided, m.Name)
	if provider != "provider" || resource != vpcs.Resource || d.notClear[m.Name] {
		return "", "not clearable"
	}
	return d.fingerprint, ""
}

func (d *fakeDecider) ClearanceFingerprint(target index.Source) (string, bool) {
	return d.fingerprint, target == vpcs && d.fingerprint != ""
}

func (d *fakeDecider) Referenced(_ index.Source, obj kcp.Meta) bool { return d.referenced[obj.Name] }

func (d *fakeDecider) WarmClearance(_ context.Context, provider logicalcluster.Name, resource schema.GroupVersionResource, obj kcp.Meta) bool {
	d.lock.Lock()
	defer d.lock.Unlock()
	if provider == "provider" && resource == vpcs.Resource {
		d.warmed = append(d.warmed, obj.Name)
	}
	if d.objects != nil && d.objects.listing.Load() {
		d.whileList = true
	}
	return !d.unprepared
}

type protections []registry.Protection

func (p protections) Protections() []registry.Protection { return p }

func TestPass(t *testing.T) {
	mark := func(age time.Duration) string {
		return inflight.Ledger{}.With(inflight.Mark{ID: strings.Repeat("a", inflight.IDLength), At: now.Add(-age)}).String()
	}
	objs := &fakeObjects{vpcs: []vpc{
		{name: "old", age: time.Hour, rv: "1"},
		{name: "old-marked", age: time.Hour, ledger: mark(2 * time.Minute), rv: "2"},
		{name: "cleared", age: time.Hour, ledger: inflight.Ledger{Clearance: inflight.Clearance("fp", "uid-cleared")}.String(), rv: "3"},
		{name: "cleared-before", age: time.Hour, ledger: inflight.Ledger{Clearance: inflight.Clearance("old-fp", "uid-cleared-before")}.String(), rv: "4"},
		{name: "young", age: 30 * time.Second, rv: "5"},
		{name: "mark-in-flight", age: time.Hour, ledger: mark(10 * time.Second), rv: "6"},
		{name: "floor-in-flight", age: time.Hour, ledger: inflight.Ledger{Floor: now.Add(-10 * time.Second)}.String(), rv: "7"},
		{name: "malformed", age: time.Hour, ledger: "garbage", rv: "8"},
		{name: "terminating", age: time.Hour, extra: map[string]any{"deletionTimestamp": now.Format(time.RFC3339)}, rv: "9"},
		{name: "deferred", age: time.Hour, extra: map[string]any{"labels": map[string]any{depv1alpha1.LabelDeletionRequested: "true"}}, rv: "10"},
		{name: "referenced", age: time.Hour, rv: "11"},
		{name: "not-clearable", age: time.Hour, rv: "12"},
		{name: "changed", age: time.Hour, rv: "13"},
		{name: "cleared-labelled", age: time.Hour, ledger: inflight.Ledger{Clearance: inflight.Clearance("fp", "uid-cleared-labelled")}.String(),
			extra: map[string]any{"labels": map[string]any{depv1alpha1.LabelCleared: "fp"}}, rv: "14"},
		// Labelled by someone else, or kept by an older webhook's write of
		// a reference: a full pass clears it.
		{name: "labelled", age: time.Hour, extra: map[string]any{"labels": map[string]any{depv1alpha1.LabelCleared: "fp"}}, rv: "15"},
	}, changed: map[string]bool{"changed": true}}
	decider := &fakeDecider{fingerprint: "fp", referenced: map[string]bool{"referenced": true}, notClear: map[string]bool{"not-clearable": true}, objects: objs}
	c := New(protections{{Target: registry.Target{Cluster: "provider", Resource: vpcs.Resource.GroupResource()}, Source: vpcs}}, objs, decider,
		Options{Workers: 3, FullEvery: 2, Metrics: NewMetrics()})
	c.now = func() time.Time { return now }

	if n := c.Pass(context.Background()); n != 4 {
		t.Errorf("Pass cleared %d objects, want 4", n)
	}
	// The decision of an object that is not due yet is prepared once it
	// is listed, once per workspace and listing (the first of young,
	// mark-in-flight and floor-in-flight), after the listing, which tells
	// the router the shard of each workspace listed.
	if want := []string{"young"}; !slices.Equal(decider.warmed, want) {
		t.Errorf("prepared the decisions of %v, want %v", decider.warmed, want)
	}
	if decider.whileList {
		t.Error("a decision was prepared while the listing was under way")
	}
	want := map[string]string{
		"old":            inflight.Ledger{Clearance: inflight.Clearance("fp", "uid-old")}.String(),
		"old-marked":     inflight.Ledger{Clearance: inflight.Clearance("fp", "uid-old-marked")}.With().String(),
		"cleared-before": inflight.Ledger{Clearance: inflight.Clearance("fp", "uid-cleared-before")}.String(),
		"labelled":       inflight.Ledger{Clearance: inflight.Clearance("fp", "uid-labelled")}.String(),
	}
	// The marks a clearance does not fold stay.
	l, _ := inflight.Parse(mark(2 * time.Minute))
	l.Clearance = inflight.Clearance("fp", "uid-old-marked")
	want["old-marked"] = l.String()
	for name, ledger := range want {
		if objs.patches[name] != ledger {
			t.Errorf("%s: ledger written %q, want %q", name, objs.patches[name], ledger)
		}
	}
	if len(objs.patches) != len(want) {
		t.Errorf("patched %v, want only %v", objs.patches, want)
	}
	// Every clearance is written with the label, and an object cleared
	// under the current fingerprint without it gets the label alone.
	wantLabels := map[string]string{"old": "fp", "old-marked": "fp", "cleared-before": "fp", "labelled": "fp", "cleared": "fp"}
	if !maps.Equal(objs.labels, wantLabels) {
		t.Errorf("labels written %v, want %v", objs.labels, wantLabels)
	}

	// What carries a clearance under the current fingerprint is not
	// decided again.
	for _, name := range decider.decided {
		if name == "cleared" {
			t.Errorf("%s, cleared under the current fingerprint, was decided", name)
		}
	}

	// The next pass lists only the objects not labelled cleared under the
	// current fingerprint; the one after lists every object again.
	objs.patches, objs.labels, decider.decided = nil, nil, nil
	c.Pass(context.Background())
	c.Pass(context.Background())
	if want := []string{"", depv1alpha1.LabelCleared + "!=fp", ""}; !slices.Equal(objs.selectors, want) {
		t.Errorf("listed with the selectors %q, want %q", objs.selectors, want)
	}
	if n := len(slices.DeleteFunc(slices.Clone(decider.decided), func(name string) bool { return name != "labelled" })); n != 1 {
		t.Errorf("the object labelled cleared without a clearance was decided %d times in a filtered and a full pass (%v), want once", n, decider.decided)
	}

	// Objects that cannot be cleared (a dependent type not labelled) are
	// not even decided.
	decider.decided, decider.fingerprint = nil, ""
	if n := c.Pass(context.Background()); n != 0 || len(decider.decided) != 0 {
		t.Errorf("Pass cleared %d, decided %v; want nothing", n, decider.decided)
	}
}

// generation is a fake index generation, which does not know the
// workspaces that changed.
type generation struct{ n atomic.Uint64 }

func (g *generation) Generation() uint64 { return g.n.Load() }

func (g *generation) ChangedClusters(uint64, int) ([]logicalcluster.Name, bool) { return nil, false }

// changeLog is a fake index generation that knows the workspace of every
// change ("" for any).
type changeLog struct{ changes []logicalcluster.Name }

func (l *changeLog) Generation() uint64 { return uint64(len(l.changes)) }

func (l *changeLog) ChangedClusters(g uint64, most int) ([]logicalcluster.Name, bool) {
	var out []logicalcluster.Name
	for _, c := range l.changes[g:] {
		if c.Empty() {
			return nil, false
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, len(out) <= most
}

// A pass that is neither full nor current lists only the workspaces in
// which the index changed, those with an object left out for its age that
// is due, and those to list again; every workspace where the index cannot
// tell, or where more than scopedMax changed.
func TestPassListsOnlyTheWorkspacesThatChanged(t *testing.T) {
	objs := &fakeObjects{vpcs: []vpc{
		{name: "old-1", cluster: "c1", age: time.Hour, rv: "1"},
		{name: "ref-1", cluster: "c1", age: time.Hour, rv: "2"},
		{name: "ref-2", cluster: "c2", age: time.Hour, rv: "3"},
		{name: "young-2", cluster: "c2", age: 30 * time.Second, rv: "4"},
		{name: "ref-3", cluster: "c3", age: time.Hour, rv: "5"},
	}, failIn: map[logicalcluster.Name]bool{}}
	decider := &fakeDecider{fingerprint: "fp", referenced: map[string]bool{"ref-1": true, "ref-2": true, "ref-3": true}, notClear: map[string]bool{}}
	metrics := NewMetrics()
	log := &changeLog{}
	c := New(protections{{Target: registry.Target{Cluster: "provider", Resource: vpcs.Resource.GroupResource()}, Source: vpcs}}, objs, decider,
		Options{Workers: 1, FullEvery: 100, Index: log, Metrics: metrics})
	at := now
	c.now = func() time.Time { return at }
	uncleared := depv1alpha1.LabelCleared + "!=fp"
	pass := func(step string, wantWildcard []string, wantScoped ...string) {
		t.Helper()
		objs.selectors, objs.scoped = nil, nil
		c.Pass(context.Background())
		if !slices.Equal(objs.selectors, wantWildcard) {
			t.Errorf("%s: listed every workspace with %q, want %q", step, objs.selectors, wantWildcard)
		}
		if !slices.Equal(objs.scoped, wantScoped) {
			t.Errorf("%s: listed the workspaces %q, want %q", step, objs.scoped, wantScoped)
		}
	}
	pass("the first pass", []string{""})
	pass("nothing changed", nil)
	log.changes = append(log.changes, "c1", "c1")
	pass("a dependent changed in c1", nil, "c1:"+uncleared)
	if got := testutil.ToFloat64(metrics.listed.WithLabelValues(ListingWorkspaces)); got != 2 {
		t.Errorf("counted %v objects listed in workspaces, want the 2 of c1", got)
	}
	pass("nothing changed since", nil)
	at = now.Add(40 * time.Second) // young-2 is old enough now
	decider.notClear["young-2"] = true
	pass("an object of c2 left out for its age is due", nil, "c2:"+uncleared)
	decider.notClear["young-2"] = false
	log.changes = append(log.changes, "c3")
	pass("the decision said not yet in c2, and c3 changed", nil, "c2:"+uncleared, "c3:"+uncleared)
	pass("everything cleared or referenced", nil)
	if _, ok := objs.patches["young-2"]; !ok {
		t.Errorf("young-2 was not cleared: %v", objs.patches)
	}
	objs.failIn["c3"] = true
	log.changes = append(log.changes, "c3")
	pass("the listing of c3 fails", nil, "c3:"+uncleared)
	objs.failIn["c3"] = false
	pass("a workspace whose listing failed is listed again", nil, "c3:"+uncleared)
	log.changes = append(log.changes, "c1", "")
	pass("a change of any workspace", []string{uncleared})
	for i := range scopedMax + 1 {
		log.changes = append(log.changes, logicalcluster.Name(fmt.Sprintf("w%d", i)))
	}
	pass("more workspaces changed than are listed one by one", []string{uncleared})
	decider.fingerprint = "fp2"
	log.changes = append(log.changes, "c1")
	pass("the fingerprint changed", []string{depv1alpha1.LabelCleared + "!=fp2"})
}

// A pass lists a resource again only when its last listing may be out of
// date: the index changed, an object left out for its age is due, or an
// object was not cleared for a reason the index does not show.
func TestPassListsOnlyWhenSomethingChanged(t *testing.T) {
	objs := &fakeObjects{vpcs: []vpc{
		{name: "old", age: time.Hour, rv: "1"},
		{name: "young", age: 30 * time.Second, rv: "2"},
		{name: "referenced", age: time.Hour, rv: "3"},
	}}
	decider := &fakeDecider{fingerprint: "fp", referenced: map[string]bool{"referenced": true}, notClear: map[string]bool{}}
	gen := &generation{}
	c := New(protections{{Target: registry.Target{Cluster: "provider", Resource: vpcs.Resource.GroupResource()}, Source: vpcs}}, objs, decider,
		Options{FullEvery: 100, Index: gen})
	at := now
	c.now = func() time.Time { return at }
	pass := func(step string, listed bool) {
		t.Helper()
		before := len(objs.selectors)
		c.Pass(context.Background())
		if got := len(objs.selectors) > before; got != listed {
			t.Errorf("%s: listed %v, want %v", step, got, listed)
		}
	}
	pass("the first pass", true)
	pass("nothing changed", false)
	gen.n.Add(1)
	pass("the index changed", true)
	pass("nothing changed since", false)
	at = now.Add(40 * time.Second) // the young VPC is old enough now
	decider.notClear["young"] = true
	pass("an object left out for its age is due", true)
	pass("the decision said not yet", true)
	decider.notClear["young"] = false
	pass("the decision said not yet, again", true)
	pass("everything cleared or referenced", false)
	decider.fingerprint = "fp2"
	pass("the fingerprint changed", true)
	pass("nothing changed since", false)
	decider.fingerprint = ""
	pass("the objects cannot be cleared now", false)
	decider.fingerprint = "fp2"
	pass("they can again, under the same fingerprint", true)
}

// A decision that could not be prepared after the listing (a probe under
// way) is prepared again at the passes that leave the resource out, until
// it is done, without listing again.
func TestPassPreparesUntilDone(t *testing.T) {
	objs := &fakeObjects{vpcs: []vpc{
		{name: "old", age: time.Hour, rv: "1"},
		{name: "young-1", age: 30 * time.Second, rv: "2"},
		{name: "young-2", age: 20 * time.Second, rv: "3"},
	}}
	decider := &fakeDecider{fingerprint: "fp", referenced: map[string]bool{}, notClear: map[string]bool{}, unprepared: true}
	c := New(protections{{Target: registry.Target{Cluster: "provider", Resource: vpcs.Resource.GroupResource()}, Source: vpcs}}, objs, decider,
		Options{FullEvery: 100, Index: &generation{}})
	c.now = func() time.Time { return now }
	pass := func(step string, wantWarmed []string) {
		t.Helper()
		listed := len(objs.selectors)
		decider.warmed = nil
		c.Pass(context.Background())
		if !slices.Equal(decider.warmed, wantWarmed) {
			t.Errorf("%s: prepared %v, want %v", step, decider.warmed, wantWarmed)
		}
		if step != "the first pass" && len(objs.selectors) != listed {
			t.Errorf("%s: listed again", step)
		}
	}
	pass("the first pass", []string{"young-1"})
	pass("not prepared yet", []string{"young-1"})
	decider.unprepared = false
	pass("prepared now", []string{"young-1"})
	pass("nothing left to prepare", nil)
}

// fakeNamespaces says which namespaces are being deleted, and that it
// cannot tell of those in unknown; it counts the questions.
type fakeNamespaces struct {
	lock        sync.Mutex
	terminating map[string]bool
	unknown     map[string]bool
	asked       map[string]int
}

func (f *fakeNamespaces) NamespaceTerminating(_ context.Context, src index.Source, cluster logicalcluster.Name, namespace string) (bool, error) {
	f.lock.Lock()
	defer f.lock.Unlock()
	key := cluster.String() + "/" + namespace
	f.asked[key]++
	if src != vpcs {
		return false, errors.New("asked through the wrong virtual workspace")
	}
	if f.unknown[key] {
		return false, errors.New("the export does not claim events")
	}
	return f.terminating[key], nil
}

// tearingDown is a fake of the resources and namespaces whose objects kcp's
// teardowns were deleting lately.
type tearingDown map[string]bool

func (td tearingDown) TearingDown(cluster logicalcluster.Name, namespace string, resource schema.GroupResource) bool {
	return td[cluster.String()+"/"+namespace+"/"+resource.String()]
}

// The objects that a teardown under way is about to delete are neither
// cleared nor labelled: the teardown makes the write useless. The items of
// a teardown tell it without asking kcp, even where kcp cannot tell (no
// events claim); otherwise kcp is asked, once per pass where it cannot
// tell, and the objects are cleared then.
func TestPassLeavesTeardownsAlone(t *testing.T) {
	clearedLedger := func(name string) string {
		return inflight.Ledger{Clearance: inflight.Clearance("fp", types.UID("uid-"+name))}.String()
	}
	objs := &fakeObjects{vpcs: []vpc{
		{name: "kept", age: time.Hour, rv: "1"},
		{name: "doomed", namespace: "doomed", age: time.Hour, rv: "2"},
		{name: "doomed-cleared", namespace: "doomed", age: time.Hour, ledger: clearedLedger("doomed-cleared"), rv: "3"},
		{name: "unknown-1", namespace: "unknown", age: time.Hour, rv: "4"},
		{name: "unknown-2", namespace: "unknown", age: time.Hour, rv: "5"},
		{name: "cluster-scoped", namespace: "-", age: time.Hour, rv: "6"},
		{name: "torn", namespace: "torn", age: time.Hour, rv: "7"},
	}}
	decider := &fakeDecider{fingerprint: "fp", referenced: map[string]bool{}, notClear: map[string]bool{}}
	ns := &fakeNamespaces{terminating: map[string]bool{"consumer/doomed": true}, unknown: map[string]bool{"consumer/unknown": true, "consumer/torn": true}, asked: map[string]int{}}
	c := New(protections{{Target: registry.Target{Cluster: "provider", Resource: vpcs.Resource.GroupResource()}, Source: vpcs}}, objs, decider,
		Options{Teardowns: tearingDown{"consumer/torn/vpcs.net.io": true, "consumer/doomed/subnets.net.io": true}, Namespaces: ns, Metrics: NewMetrics()})
	c.now = func() time.Time { return now }
	if n := c.Pass(context.Background()); n != 4 {
		t.Errorf("Pass cleared %d objects, want 4", n)
	}
	want := map[string]string{"kept": "fp", "unknown-1": "fp", "unknown-2": "fp", "cluster-scoped": "fp"}
	if !maps.Equal(objs.labels, want) {
		t.Errorf("labels written %v, want %v", objs.labels, want)
	}
	if slices.Contains(decider.decided, "doomed") || slices.Contains(decider.decided, "torn") {
		t.Errorf("an object that a teardown deletes was decided: %v", decider.decided)
	}
	// A cluster-scoped object is deleted with its workspace: asked of the
	// workspace's namespace default.
	if wantAsked := map[string]int{"consumer/default": 2, "consumer/doomed": 2, "consumer/unknown": 1}; !maps.Equal(ns.asked, wantAsked) {
		t.Errorf("asked %v, want %v", ns.asked, wantAsked)
	}
}

// A pass waits until the index has been quiet for Settle, and no longer
// than Interval while it keeps changing.
func TestSettle(t *testing.T) {
	// Generous upper bounds: a loaded machine delays the ticks.
	const settle, interval, slack = 40 * time.Millisecond, 2 * time.Second, time.Second
	tests := []struct {
		name        string
		changing    time.Duration
		least, most time.Duration
	}{
		{name: "quiet", least: settle, most: slack},
		{name: "changing for a while", changing: 150 * time.Millisecond, least: 150*time.Millisecond + settle, most: 150*time.Millisecond + slack},
		{name: "changing throughout", changing: 2 * interval, least: interval, most: interval + slack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gen := &generation{}
			c := New(protections{}, &fakeObjects{}, &fakeDecider{}, Options{Index: gen, Settle: settle, Interval: interval})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			start := time.Now()
			go func() {
				for time.Since(start) < tt.changing && ctx.Err() == nil {
					gen.n.Add(1)
					time.Sleep(2 * time.Millisecond)
				}
			}()
			c.settle(ctx)
			if took := time.Since(start); took < tt.least || took > tt.most {
				t.Errorf("settled after %s, want between %s and %s", took, tt.least, tt.most)
			}
		})
	}
}

// The clearer counts the objects it lists, by listing: every object in a
// full pass, those not labelled cleared under the current fingerprint in
// the others (referenced ones included), none where its listing is current.
func TestPassCountsWhatItLists(t *testing.T) {
	objs := &fakeObjects{vpcs: []vpc{
		{name: "old", age: time.Hour, rv: "1"},
		{name: "referenced", age: time.Hour, rv: "2"},
		{name: "cleared-labelled", age: time.Hour, ledger: inflight.Ledger{Clearance: inflight.Clearance("fp", "uid-cleared-labelled")}.String(),
			extra: map[string]any{"labels": map[string]any{depv1alpha1.LabelCleared: "fp"}}, rv: "3"},
	}}
	decider := &fakeDecider{fingerprint: "fp", referenced: map[string]bool{"referenced": true}, notClear: map[string]bool{}}
	metrics := NewMetrics()
	var gen generation
	c := New(protections{{Target: registry.Target{Cluster: "provider", Resource: vpcs.Resource.GroupResource()}, Source: vpcs}}, objs, decider,
		Options{Workers: 1, FullEvery: 10, Metrics: metrics, Index: &gen})
	c.now = func() time.Time { return now }
	listed := func(listing string) float64 {
		return testutil.ToFloat64(metrics.listed.WithLabelValues(listing))
	}
	tests := []struct {
		step                string
		change              bool
		wantFull, wantOther float64
	}{
		// The first pass lists every object.
		{step: "first pass", wantFull: 3},
		// "old" was cleared and labelled (the fake keeps the object as it
		// was, so a listing returns it again); nothing changed since.
		{step: "nothing changed", wantFull: 3},
		// The index changed: the objects not labelled cleared are listed,
		// the referenced one included.
		{step: "the index changed", change: true, wantFull: 3, wantOther: 2},
	}
	for _, tt := range tests {
		if tt.change {
			gen.n.Add(1)
		}
		c.Pass(context.Background())
		if got, other := listed(ListingFull), listed(ListingUncleared); got != tt.wantFull || other != tt.wantOther {
			t.Errorf("%s: listed %v in full passes and %v in others, want %v and %v", tt.step, got, other, tt.wantFull, tt.wantOther)
		}
	}
}
