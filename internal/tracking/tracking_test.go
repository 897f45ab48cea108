package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

var (
	vms  = index.Source{Export: kcp.ObjectKey{Cluster: "compute", Name: "compute.io"}, Resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}}
	vpcs = index.Source{Export: kcp.ObjectKey{Cluster: "network", Name: "network.io"}, Resource: schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}}
)

// fakeProber answers dry-run patches as the webhooks would: the labelling
// webhook sets the scheme label to scheme (if set), the guard keeps the
// stored ledger (if guard) and, unless oldGuard, the stored cleared label
// (none); otherwise the patch is applied as sent.
type fakeProber struct {
	lock     sync.Mutex
	scheme   string
	guard    bool
	oldGuard bool
	err      error
	probes   int
	// The check of new references: the top-level fields for which kcp
	// calls it (it refuses a probe there), whether the resource has a
	// status subresource, and an error that every write of a reference
	// gets before admission (a schema's refusal, say).
	checked   map[string]bool
	noStatus  bool
	refuseAll error
	// sent are the check probes' patches, with "/status" before those
	// through the status subresource.
	sent []string
	// answer, if set, is the answer of the webhooks to a probe of kind
	// that wrote value; the labelling webhook answers for vouches.
	answer  func(kind Kind, value, scheme string) string
	vouches string
	// requires, if set, is what a schema needs in every write of a
	// reference (other fields of a list's elements): without it the write
	// is invalid. object is the stored object (Get).
	requires string
	object   []byte
	gets     int
}

func (p *fakeProber) Get(_ context.Context, _ index.Source, _ logicalcluster.Name, _, name string) ([]byte, error) {
	p.lock.Lock()
	defer p.lock.Unlock()
	p.gets++
	if p.object == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: "compute.io", Resource: "virtualmachines"}, name)
	}
	return p.object, nil
}

// checkProbe answers a probe of the check of new references as kcp would.
func (p *fakeProber) checkProbe(body []byte, status bool) ([]byte, error) {
	p.lock.Lock()
	defer p.lock.Unlock()
	gr := schema.GroupResource{Group: "compute.io", Resource: "virtualmachines"}
	if status {
		p.sent = append(p.sent, "/status "+string(body))
		if p.noStatus {
			return nil, apierrors.NewNotFound(gr, "vm-1")
		}
	} else {
		p.sent = append(p.sent, string(body))
	}
	if p.refuseAll != nil {
		return nil, p.refuseAll
	}
	if p.requires != "" && !strings.Contains(string(body), p.requires) {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: "compute.io", Kind: "VirtualMachine"}, "vm-1", nil)
	}
	var patch map[string]any
	if err := json.Unmarshal(body, &patch); err != nil {
		return nil, err
	}
	for field := range patch {
		// A write through the status subresource changes the status
		// alone; through the resource, all but the status of a resource
		// that has a status subresource.
		if status != (field == "status") && (status || !p.noStatus) {
			continue
		}
		if p.checked[field] {
			i := strings.Index(string(body), CheckProbePrefix)
			name := string(body)[i : i+len(CheckProbePrefix)+8]
			answer := ""
			if p.answer != nil {
				answer = p.answer(KindCheck, name, "")
			}
			return nil, apierrors.NewForbidden(gr, "vm-1", errors.New(`admission webhook "references.dependencies.opendefense.cloud" denied the request: `+CheckProbeAnswer(name, answer)))
		}
	}
	return body, nil
}

func (p *fakeProber) DryRunPatchStatus(_ context.Context, _ index.Source, _ logicalcluster.Name, _, _ string, body []byte) ([]byte, error) {
	return p.checkProbe(body, true)
}

func (p *fakeProber) set(scheme string, guard bool, err error) {
	p.lock.Lock()
	defer p.lock.Unlock()
	p.scheme, p.guard, p.err = scheme, guard, err
}

func (p *fakeProber) count() int {
	p.lock.Lock()
	defer p.lock.Unlock()
	return p.probes
}

func (p *fakeProber) DryRunPatch(_ context.Context, _ index.Source, _ logicalcluster.Name, _, _ string, body []byte) ([]byte, error) {
	if !strings.Contains(string(body), `"metadata"`) {
		return p.checkProbe(body, false)
	}
	p.lock.Lock()
	defer p.lock.Unlock()
	var patch struct {
		Metadata struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &patch); err != nil {
		return nil, err
	}
	m := patch.Metadata
	// A probe of the guard is two patches: count its first.
	if _, second := m.Labels[depv1alpha1.LabelCleared]; !second {
		p.probes++
	}
	if p.err != nil {
		return nil, p.err
	}
	answer := func(kind Kind, value, scheme string) {
		if p.answer != nil {
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[depv1alpha1.AnnotationProbeAnswer] = p.answer(kind, value, scheme)
		}
	}
	if v, ok := m.Labels[depv1alpha1.LabelReferencesScheme]; ok && p.scheme != "" {
		m.Labels[depv1alpha1.LabelReferencesScheme] = p.scheme
		answer(KindLabelling, v, p.vouches)
	}
	if v, ok := m.Annotations[depv1alpha1.AnnotationAdmittedReferences]; ok && p.guard {
		m.Annotations[depv1alpha1.AnnotationAdmittedReferences] = "v1 f=0 l=0"
		answer(KindGuard, v, "")
	}
	if v, ok := m.Labels[depv1alpha1.LabelCleared]; ok && p.guard && !p.oldGuard {
		delete(m.Labels, depv1alpha1.LabelCleared)
		answer(KindGuard, v, "")
	}
	return json.Marshal(map[string]any{"metadata": m})
}

// clock is a settable now.
type clock struct {
	lock sync.Mutex
	t    time.Time
}

func (c *clock) now() time.Time {
	c.lock.Lock()
	defer c.lock.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.lock.Lock()
	defer c.lock.Unlock()
	c.t = c.t.Add(d)
}

// since calls Since until the background probe has told (or not).
func since(t *testing.T, tr *Tracker, key Key) (time.Time, bool) {
	t.Helper()
	obj := Object{Cluster: "c1", Namespace: "default", Name: "x"}
	tr.Since(context.Background(), key, obj)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		tr.lock.Lock()
		running := tr.states[key].running
		tr.lock.Unlock()
		if !running {
			return tr.Since(context.Background(), key, Object{})
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the probe did not end")
	return time.Time{}, false
}

func TestTrackerProbes(t *testing.T) {
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	labelling := Key{Kind: KindLabelling, Source: vms, Shard: "https://shard-1/vw", Scheme: "s1"}
	guard := Key{Kind: KindGuard, Source: vpcs, Shard: "https://shard-1/vw"}
	tests := []struct {
		name     string
		key      Key
		scheme   string
		guard    bool
		oldGuard bool
		want     bool
	}{
		{"the labelling webhook of the scheme ran", labelling, "s1", false, false, true},
		{"the labelling webhook of the scheme ran on a dependent with too many references for labels", labelling, reflabels.TooMany("s1"), false, false, true},
		{"a labelling webhook of another scheme ran on a dependent with too many references", labelling, reflabels.TooMany("s0"), false, false, false},
		{"a labelling webhook of another scheme ran", labelling, "s0", false, false, false},
		{"no labelling webhook ran", labelling, "", false, false, false},
		{"the guard ran", guard, "", true, false, true},
		{"a guard that keeps the ledger but not the cleared label ran (an earlier release or configuration)", guard, "", true, true, false},
		{"no guard ran", guard, "s1", false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProber{oldGuard: tt.oldGuard}
			p.set(tt.scheme, tt.guard, nil)
			c := &clock{t: start}
			tr := New(p, Options{})
			tr.now = c.now
			got, ok := since(t, tr, tt.key)
			if ok != tt.want || ok && !got.Equal(start) {
				t.Errorf("Since = %v, %v; want %v since the probe", got, ok, tt.want)
			}
		})
	}
}

func TestTrackerProbesTheCheck(t *testing.T) {
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	ref := func(path string) fieldpath.Reference {
		r, err := fieldpath.ParseReference(fieldpath.ReferenceSpec{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	spec, spec2, status := ref(".spec.vpcRef.name"), ref(".spec.nics[*].vpc"), ref(".status.vpc")
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "compute.io", Kind: "VirtualMachine"}, "vm-1", nil)
	tests := []struct {
		name     string
		refs     []fieldpath.Reference
		checked  map[string]bool
		noStatus bool
		want     bool
		wantSent []string
	}{
		{"called for the spec", []fieldpath.Reference{spec}, map[string]bool{"spec": true}, false, true, []string{`{"spec":{"vpcRef":{"name":"P"}}}`}},
		{"one probe per top-level field", []fieldpath.Reference{spec2, spec}, map[string]bool{"spec": true}, false, true, []string{`{"spec":{"nics":[{"vpc":"P"}]}}`}},
		{"not called for the spec", []fieldpath.Reference{spec}, map[string]bool{"status": true}, false, false, []string{`{"spec":{"vpcRef":{"name":"P"}}}`}},
		{"called through the status subresource", []fieldpath.Reference{status}, map[string]bool{"status": true}, false, true, []string{`/status {"status":{"vpc":"P"}}`}},
		{"no status subresource: through the resource", []fieldpath.Reference{status}, map[string]bool{"status": true}, true, true,
			[]string{`/status {"status":{"vpc":"P"}}`, `{"status":{"vpc":"P"}}`}},
		{"called for the spec but not the status", []fieldpath.Reference{status, spec}, map[string]bool{"spec": true}, false, false,
			[]string{`{"spec":{"vpcRef":{"name":"P"}}}`, `/status {"status":{"vpc":"P"}}`}},
		{"called for both", []fieldpath.Reference{status, spec}, map[string]bool{"spec": true, "status": true}, false, true,
			[]string{`{"spec":{"vpcRef":{"name":"P"}}}`, `/status {"status":{"vpc":"P"}}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProber{checked: tt.checked, noStatus: tt.noStatus}
			c := &clock{t: start}
			tr := New(p, Options{})
			tr.now = c.now
			key := Key{Kind: KindCheck, Source: vms, Shard: "https://shard-1/vw", Scheme: CheckScheme(tt.refs)}
			tr.Since(context.Background(), key, Object{Cluster: "c1", Namespace: "default", Name: "vm-1", References: tt.refs})
			got, ok := since(t, tr, key)
			if ok != tt.want || ok && !got.Equal(start) {
				t.Errorf("Since = %v, %v; want %v since the probe", got, ok, tt.want)
			}
			p.lock.Lock()
			defer p.lock.Unlock()
			sent := make([]string, len(p.sent))
			for i, body := range p.sent {
				j := strings.Index(body, CheckProbePrefix)
				sent[i] = body[:j] + "P" + body[j+len(CheckProbePrefix)+8:]
			}
			if !slices.Equal(sent, tt.wantSent) {
				t.Errorf("sent %q, want %q", sent, tt.wantSent)
			}
		})
	}

	t.Run("a patch refused before admission tells nothing", func(t *testing.T) {
		p := &fakeProber{checked: map[string]bool{"spec": true}, refuseAll: invalid}
		tr := New(p, Options{})
		key := Key{Kind: KindCheck, Source: vms, Shard: "https://shard-1/vw", Scheme: "x"}
		if _, err := tr.check(context.Background(), key, Object{Name: "vm-1", References: []fieldpath.Reference{spec}}); err == nil {
			t.Error("a probe refused by the schema told")
		}
		if _, err := tr.check(context.Background(), key, Object{Name: "vm-1"}); err == nil {
			t.Error("a probe without references told")
		}
	})
	attachments := ref(".status.attachments[*].vpc")
	t.Run("a schema that needs other fields of a list's elements: a reference the object holds is renamed, the rest kept", func(t *testing.T) {
		p := &fakeProber{checked: map[string]bool{"status": true}, requires: `"id"`,
			object: []byte(`{"metadata":{"name":"vm-1"},"spec":{"size":1},"status":{"phase":"Up","attachments":[{"id":"a1","vpc":"vpc-a"}]}}`)}
		tr := New(p, Options{})
		got, err := tr.check(context.Background(), Key{Kind: KindCheck}, Object{Name: "vm-1", References: []fieldpath.Reference{attachments}})
		if err != nil || !got {
			t.Fatalf("check = %v, %v; want the check in effect", got, err)
		}
		want := []string{`/status {"status":{"attachments":[{"vpc":"P"}]}}`, `/status {"status":{"attachments":[{"id":"a1","vpc":"P"}],"phase":"Up"}}`}
		for i, body := range p.sent {
			j := strings.Index(body, CheckProbePrefix)
			p.sent[i] = body[:j] + "P" + body[j+len(CheckProbePrefix)+8:]
		}
		if !slices.Equal(p.sent, want) {
			t.Errorf("sent %q, want %q", p.sent, want)
		}
	})
	t.Run("a schema that needs other fields, on an object that holds no such reference, tells nothing", func(t *testing.T) {
		p := &fakeProber{checked: map[string]bool{"status": true}, requires: `"id"`, object: []byte(`{"status":{"attachments":[]}}`)}
		tr := New(p, Options{})
		if _, err := tr.check(context.Background(), Key{Kind: KindCheck}, Object{Name: "vm-1", References: []fieldpath.Reference{attachments}}); err == nil || p.gets != 1 {
			t.Errorf("check: %v after %d reads; want an error after one", err, p.gets)
		}
	})
	t.Run("a probe admitted as sampled reads nothing", func(t *testing.T) {
		p := &fakeProber{checked: map[string]bool{"status": true}}
		tr := New(p, Options{})
		if got, err := tr.check(context.Background(), Key{Kind: KindCheck}, Object{Name: "vm-1", References: []fieldpath.Reference{attachments}}); err != nil || !got || p.gets != 0 {
			t.Errorf("check = %v, %v after %d reads; want in effect without a read", got, err, p.gets)
		}
	})
	t.Run("another denial that names the probe's value tells nothing", func(t *testing.T) {
		p := &fakeProber{refuseAll: apierrors.NewForbidden(schema.GroupResource{Resource: "virtualmachines"}, "vm-1", errors.New("denied: "+CheckProbePrefix))}
		tr := New(p, Options{})
		if _, err := tr.check(context.Background(), Key{Kind: KindCheck}, Object{Name: "vm-1", References: []fieldpath.Reference{spec}}); err == nil {
			t.Error("a denial without the check's answer told")
		}
	})
	t.Run("the scheme names the set of references", func(t *testing.T) {
		if CheckScheme([]fieldpath.Reference{spec, status}) != CheckScheme([]fieldpath.Reference{status, spec, spec}) {
			t.Error("the scheme depends on the order or on duplicates")
		}
		if CheckScheme([]fieldpath.Reference{spec}) == CheckScheme([]fieldpath.Reference{spec, status}) {
			t.Error("two sets of references share a scheme")
		}
	})
}

func TestTrackerKeepsSinceAcrossRechecksAndDropsIt(t *testing.T) {
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	key := Key{Kind: KindGuard, Source: vpcs, Shard: "https://shard-1/vw"}
	p := &fakeProber{}
	p.set("", true, nil)
	c := &clock{t: start}
	tr := New(p, Options{Recheck: time.Minute, Retry: time.Second})
	tr.now = c.now
	if got, ok := since(t, tr, key); !ok || !got.Equal(start) {
		t.Fatalf("Since = %v, %v", got, ok)
	}
	// Within Recheck: no probe.
	c.add(30 * time.Second)
	if _, ok := since(t, tr, key); !ok || p.count() != 1 {
		t.Fatalf("probed %d times within Recheck", p.count())
	}
	// A recheck that shows it again keeps the first time.
	c.add(time.Minute)
	if got, ok := since(t, tr, key); !ok || !got.Equal(start) || p.count() != 2 {
		t.Fatalf("after a recheck: Since = %v, %v, %d probes", got, ok, p.count())
	}
	// A probe that does not tell (the object is gone) changes nothing, and
	// the next is tried only after Retry.
	p.set("", true, errors.New("not found"))
	c.add(time.Minute)
	if got, ok := since(t, tr, key); !ok || !got.Equal(start) {
		t.Fatalf("after a probe that failed: Since = %v, %v", got, ok)
	}
	n := p.count()
	if _, _ = since(t, tr, key); p.count() != n {
		t.Fatal("probed again before Retry")
	}
	// A probe that shows the guard gone drops it; the next that shows it
	// starts a new since.
	p.set("", false, nil)
	c.add(2 * time.Second)
	if _, ok := since(t, tr, key); ok {
		t.Fatal("still in effect after a probe showed it gone")
	}
	p.set("", true, nil)
	c.add(2 * time.Second)
	if got, ok := since(t, tr, key); !ok || !got.Equal(start.Add(2*time.Minute+34*time.Second)) {
		t.Fatalf("back in effect: Since = %v, %v", got, ok)
	}
}

func TestTrackerNeedsAnObject(t *testing.T) {
	p := &fakeProber{}
	tr := New(p, Options{})
	if _, ok := tr.Since(context.Background(), Key{Kind: KindGuard, Source: vpcs, Shard: "s"}, Object{}); ok || p.count() != 0 {
		t.Fatal("probed without an object")
	}
}

// fakeRules serves rules and their guards; the dependents can be
// labelled unless unlabellable.
type fakeRules struct {
	rules        []*registry.Rule
	guards       map[kcp.ObjectKey]registry.Guard
	unlabellable bool
}

func (f *fakeRules) Rules() []*registry.Rule { return f.rules }
func (f *fakeRules) GuardOf(key kcp.ObjectKey) (registry.Guard, bool) {
	g, ok := f.guards[key]
	return g, ok
}
func (f *fakeRules) Changes() <-chan struct{} { return nil }
func (f *fakeRules) Labelling(registry.Target) (registry.Labelling, bool) {
	if f.unlabellable {
		return registry.Labelling{Reason: "a reference in the status"}, true
	}
	return registry.Labelling{Labellable: true, Scheme: reflabels.Scheme{Fingerprint: "s1"}}, true
}

// fakeDependents holds one dependent on each shard in shards.
type fakeDependents []string

func (f fakeDependents) DependentPerShard(index.Source) map[string]kcp.Meta {
	out := map[string]kcp.Meta{}
	for _, s := range f {
		out[s] = kcp.Meta{Cluster: "c1", Namespace: "default", Name: "vm-1"}
	}
	return out
}

// fakeActivation has the labelling webhook in effect on the shards it
// names, and the check of new references where it names "check@<shard>"
// (probed with references).
type fakeActivation map[string]bool

func (f fakeActivation) Since(_ context.Context, key Key, obj Object) (time.Time, bool) {
	if key.Kind == KindCheck {
		return time.Now(), f["check@"+key.Shard] && len(obj.References) > 0 && key.Scheme == CheckScheme(obj.References)
	}
	return time.Now(), f[key.Shard]
}

// Why says the last probe was refused where it names "forbidden@<shard>".
func (f fakeActivation) Why(key Key) string {
	if f["forbidden@"+key.Shard] {
		return "the last probe failed: 403 Forbidden"
	}
	return ""
}

type fakeGrants map[index.Source]bool

func (g fakeGrants) MayPatch(_ context.Context, src index.Source) (bool, error) {
	may, ok := g[src]
	if !ok {
		return false, errors.New("no answer")
	}
	return may, nil
}

func TestReporter(t *testing.T) {
	routers := index.Source{Export: kcp.ObjectKey{Cluster: "network", Name: "network.io"}, Resource: schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "routers"}}
	path := fieldpath.Reference{}
	rule := func(name string, labelled bool) *registry.Rule {
		return &registry.Rule{Key: kcp.ObjectKey{Cluster: "compute", Name: name}, Labelled: labelled, Dependent: vms}
	}
	guard := func(name string, targets ...index.Source) registry.Guard {
		g := registry.Guard{Rule: kcp.ObjectKey{Cluster: "compute", Name: name}, Dependent: vms}
		for _, t := range targets {
			g.References = append(g.References, registry.GuardReference{Path: path, Target: t})
		}
		return g
	}
	statusRef, err := fieldpath.ParseReference(fieldpath.ReferenceSpec{Path: ".status.vpc"})
	if err != nil {
		t.Fatal(err)
	}
	unlabellable := func(name string) *registry.Rule {
		r := rule(name, false)
		r.References = []registry.Reference{{Target: vpcs.Resource.GroupResource(), Path: statusRef}}
		return r
	}
	tests := []struct {
		name         string
		rule         *registry.Rule
		guard        *registry.Guard
		grants       fakeGrants
		shards       fakeDependents
		inEffect     fakeActivation
		unlabellable bool
		wantStatus   metav1.ConditionStatus
		wantReason   string
		wantText     string
		wantPending  bool
	}{
		{"not labelled", rule("r", false), nil, nil, nil, nil, false, metav1.ConditionFalse, depv1alpha1.ReasonNotLabelled, "DependentsLabelled", false},
		{"tracked: granted, and the labelling webhook in effect on every shard with dependents", rule("r", true), ptr(guard("r", vpcs, routers, index.Source{})), fakeGrants{vpcs: true, routers: true},
			fakeDependents{"s1", "s2"}, fakeActivation{"s1": true, "s2": true}, false, metav1.ConditionTrue, depv1alpha1.ReasonTracked, "routers.network.io, vpcs.network.io", false},
		{"the labelling webhook not seen in effect on a shard yet", rule("r", true), ptr(guard("r", vpcs)), fakeGrants{vpcs: true},
			fakeDependents{"s1", "s2"}, fakeActivation{"s1": true}, false, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "in effect on the shard of s2", true},
		{"the labelling webhook not seen in effect on a shard, whose probe was refused: the condition says so", rule("r", true), ptr(guard("r", vpcs)), fakeGrants{vpcs: true},
			fakeDependents{"s1", "s2"}, fakeActivation{"s1": true, "forbidden@s2": true}, false, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "in effect on the shard of s2 (the last probe failed: 403 Forbidden); until then", true},
		{"no dependent to probe with yet", rule("r", true), ptr(guard("r", vpcs)), fakeGrants{vpcs: true},
			nil, nil, false, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "there is none yet", true},
		{"a protected type without the grant", rule("r", true), ptr(guard("r", vpcs, routers)), fakeGrants{vpcs: true, routers: false},
			fakeDependents{"s1"}, fakeActivation{"s1": true}, false, metav1.ConditionFalse, depv1alpha1.ReasonAccessDenied, `grant the webhook's user "dependency-webhook" patch on apiexports/content of the APIExport network.io in the workspace of routers.network.io`, false},
		{"a grant that cannot be told", rule("r", true), ptr(guard("r", vpcs)), fakeGrants{},
			nil, nil, false, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "no answer", false},
		{"nothing bound", rule("r", true), ptr(guard("r", index.Source{})), fakeGrants{},
			nil, nil, false, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "binds", false},
		{"not registered", rule("r", true), nil, fakeGrants{},
			nil, nil, false, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "registered", false},
		{"cannot be labelled: tracked once the check of new references is seen in effect on every shard", unlabellable("r"), ptr(guard("r", vpcs)), fakeGrants{vpcs: true},
			fakeDependents{"s1", "s2"}, fakeActivation{"check@s1": true, "check@s2": true}, true, metav1.ConditionTrue, depv1alpha1.ReasonTracked, "vpcs.network.io", false},
		{"cannot be labelled: the check not seen in effect on a shard yet (the labelling webhook tells nothing)", unlabellable("r"), ptr(guard("r", vpcs)), fakeGrants{vpcs: true},
			fakeDependents{"s1", "s2"}, fakeActivation{"check@s1": true, "s2": true}, true, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "the check of new references of the current rules in effect on the shard of s2", true},
		{"cannot be labelled: no dependent to probe with yet", unlabellable("r"), ptr(guard("r", vpcs)), fakeGrants{vpcs: true},
			nil, nil, true, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "the check of new references records new references (there is none yet)", true},
		{"cannot be labelled: a protected type without the grant", unlabellable("r"), ptr(guard("r", vpcs)), fakeGrants{vpcs: false},
			fakeDependents{"s1"}, fakeActivation{"check@s1": true}, true, metav1.ConditionFalse, depv1alpha1.ReasonAccessDenied, "patch on apiexports/content", false},
		{"not labelled yet, though it can be: the check tells nothing", rule("r", false), ptr(guard("r", vpcs)), fakeGrants{vpcs: true},
			fakeDependents{"s1"}, fakeActivation{"check@s1": true}, false, metav1.ConditionFalse, depv1alpha1.ReasonNotLabelled, "DependentsLabelled", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := &fakeRules{rules: []*registry.Rule{tt.rule}, guards: map[kcp.ObjectKey]registry.Guard{}, unlabellable: tt.unlabellable}
			if tt.guard != nil {
				rules.guards[tt.rule.Key] = *tt.guard
			}
			var got []metav1.Condition
			write := func(_ context.Context, key kcp.ObjectKey, condition func(int64) metav1.Condition) error {
				got = append(got, condition(3))
				return nil
			}
			pending := NewReporter(rules, tt.grants, tt.shards, tt.inEffect, write, 0, "dependency-webhook").Pass(context.Background())
			if pending != tt.wantPending {
				t.Errorf("Pass() = %v, want %v", pending, tt.wantPending)
			}
			if len(got) != 1 {
				t.Fatalf("wrote %d conditions", len(got))
			}
			c := got[0]
			if c.Type != depv1alpha1.ConditionReferencesTracked || c.Status != tt.wantStatus || c.Reason != tt.wantReason || c.ObservedGeneration != 3 || !strings.Contains(c.Message, tt.wantText) {
				t.Errorf("condition %+v; want %s/%s containing %q", c, tt.wantStatus, tt.wantReason, tt.wantText)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// Why says why the last probe did not show the webhook in effect, in
// words that do not change from one probe to the next.
func TestTrackerSaysWhy(t *testing.T) {
	gr := schema.GroupResource{Group: "compute.io", Resource: "virtualmachines"}
	key := Key{Kind: KindLabelling, Source: vms, Shard: "https://shard-1/vw", Scheme: "s1"}
	tests := []struct {
		name   string
		scheme string
		err    error
		want   string
	}{
		{"in effect", "s1", nil, ""},
		{"not in effect", "", nil, "the last probe found it not in effect"},
		{"refused by kcp", "s1", apierrors.NewForbidden(gr, "vm-1", errors.New("no patch")), "the last probe failed: 403 Forbidden (a probe is a dry-run patch of a dependent through its provider's virtual workspace, for which the webhook needs patch on apiexports/content"},
		{"refused by the schema", "s1", apierrors.NewInvalid(schema.GroupKind{Group: "compute.io", Kind: "VirtualMachine"}, "vm-1", nil), "the last probe failed: 422 Invalid"},
		{"timed out", "s1", context.DeadlineExceeded, "the last probe timed out"},
		{"another error", "s1", errors.New("connection refused to dependency-probe-abcdefgh"), "the last probe failed (the webhook's log at -v=1 says why)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProber{}
			p.set(tt.scheme, false, tt.err)
			tr := New(p, Options{})
			if got := tr.Why(key); got != "" {
				t.Errorf("Why before any probe = %q", got)
			}
			since(t, tr, key)
			got := tr.Why(key)
			if tt.want == "" && got != "" || !strings.HasPrefix(got, tt.want) {
				t.Errorf("Why = %q, want %q", got, tt.want)
			}
		})
	}
}
