package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

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
	if _, ok := m.Labels[depv1alpha1.LabelReferencesScheme]; ok && p.scheme != "" {
		m.Labels[depv1alpha1.LabelReferencesScheme] = p.scheme
	}
	if _, ok := m.Annotations[depv1alpha1.AnnotationAdmittedReferences]; ok && p.guard {
		m.Annotations[depv1alpha1.AnnotationAdmittedReferences] = "v1 f=0 l=0"
	}
	if _, ok := m.Labels[depv1alpha1.LabelCleared]; ok && p.guard && !p.oldGuard {
		delete(m.Labels, depv1alpha1.LabelCleared)
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

// fakeRules serves rules and their guards.
type fakeRules struct {
	rules  []*registry.Rule
	guards map[kcp.ObjectKey]registry.Guard
}

func (f *fakeRules) Rules() []*registry.Rule { return f.rules }
func (f *fakeRules) GuardOf(key kcp.ObjectKey) (registry.Guard, bool) {
	g, ok := f.guards[key]
	return g, ok
}
func (f *fakeRules) Changes() <-chan struct{} { return nil }
func (f *fakeRules) Labelling(registry.Target) (registry.Labelling, bool) {
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

// fakeActivation has the webhooks in effect on the shards in effect.
type fakeActivation map[string]bool

func (f fakeActivation) Since(_ context.Context, key Key, _ Object) (time.Time, bool) {
	return time.Now(), f[key.Shard]
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
	tests := []struct {
		name        string
		rule        *registry.Rule
		guard       *registry.Guard
		grants      fakeGrants
		shards      fakeDependents
		inEffect    fakeActivation
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantText    string
		wantPending bool
	}{
		{"not labelled", rule("r", false), nil, nil, nil, nil, metav1.ConditionFalse, depv1alpha1.ReasonNotLabelled, "DependentsLabelled", false},
		{"tracked: granted, and the labelling webhook in effect on every shard with dependents", rule("r", true), ptr(guard("r", vpcs, routers, index.Source{})), fakeGrants{vpcs: true, routers: true},
			fakeDependents{"s1", "s2"}, fakeActivation{"s1": true, "s2": true}, metav1.ConditionTrue, depv1alpha1.ReasonTracked, "routers.network.io, vpcs.network.io", false},
		{"the labelling webhook not seen in effect on a shard yet", rule("r", true), ptr(guard("r", vpcs)), fakeGrants{vpcs: true},
			fakeDependents{"s1", "s2"}, fakeActivation{"s1": true}, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "in effect on the shard of s2", true},
		{"no dependent to probe with yet", rule("r", true), ptr(guard("r", vpcs)), fakeGrants{vpcs: true},
			nil, nil, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "there is none yet", true},
		{"a protected type without the grant", rule("r", true), ptr(guard("r", vpcs, routers)), fakeGrants{vpcs: true, routers: false},
			fakeDependents{"s1"}, fakeActivation{"s1": true}, metav1.ConditionFalse, depv1alpha1.ReasonAccessDenied, `grant the webhook's user "dependency-webhook" patch on apiexports/content of the APIExport network.io in the workspace of routers.network.io`, false},
		{"a grant that cannot be told", rule("r", true), ptr(guard("r", vpcs)), fakeGrants{},
			nil, nil, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "no answer", false},
		{"nothing bound", rule("r", true), ptr(guard("r", index.Source{})), fakeGrants{},
			nil, nil, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "binds", false},
		{"not registered", rule("r", true), nil, fakeGrants{},
			nil, nil, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "registered", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := &fakeRules{rules: []*registry.Rule{tt.rule}, guards: map[kcp.ObjectKey]registry.Guard{}}
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
