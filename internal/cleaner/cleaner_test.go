package cleaner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/marks"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

var (
	vpcs      = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}
	vms       = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
	target    = registry.Target{Cluster: "c-net", Resource: vpcs.GroupResource()}
	targetSrc = index.Source{Export: kcp.ObjectKey{Cluster: "c-net", Name: "network.io"}, Resource: vpcs}
	vmSrc     = index.Source{Export: kcp.ObjectKey{Cluster: "c-compute", Name: "compute.io"}, Resource: vms}
	vmPath    = fieldpathtest.MustParse(".spec.vpc")
	fp        = "0123456789abcdef"
	delay     = 2 * time.Minute
)

// protection returns the VPCs protected by one rule of VirtualMachines.
func protection(rule *registry.Rule) registry.Protection {
	return registry.Protection{
		Target: target, Source: targetSrc, Fingerprint: fp, Rules: []*registry.Rule{rule},
		Entries: []registry.Entry{{Rule: rule.Key, Dependent: vmSrc, DependentKind: "VirtualMachine", Paths: []fieldpath.Reference{vmPath}}},
	}
}

func vmRule() *registry.Rule {
	return &registry.Rule{Key: kcp.ObjectKey{Cluster: "c-compute", Name: "vm-rule"}, UID: "uid-rule", Generation: 1, Finalized: true}
}

// fakeRules are registered rules.
type fakeRules struct {
	protections []registry.Protection
	rules       []*registry.Rule
}

func (f *fakeRules) Protections() []registry.Protection { return f.protections }
func (f *fakeRules) Rules() []*registry.Rule            { return f.rules }
func (f *fakeRules) Changes() <-chan struct{}           { return nil }

type loaded bool

func (l loaded) Loaded() bool { return bool(l) }

// object is a VPC in a fake workspace.
type object struct {
	kcp.Meta
	since string
}

// fakeObjects holds VPCs by "namespace/name" (all in logical cluster
// consumer), the VirtualMachines' references that the index holds and that
// a live read finds, and records every call.
type fakeObjects struct {
	vpcs   map[string]*object
	states map[index.Source]index.Phase
	// indexed and live are the names of referenced VPCs, as the index and
	// a live read see them.
	indexed, live []string
	rv            int
	calls         []string
	// conflictOnce makes the next write with a precondition fail with a
	// conflict, as if the object had changed.
	conflictOnce bool
	// patchErr fails every patch.
	patchErr error
}

func newObjects(vpcs ...object) *fakeObjects {
	f := &fakeObjects{vpcs: map[string]*object{}, states: map[index.Source]index.Phase{}, rv: 100}
	for i := range vpcs {
		o := vpcs[i]
		o.Cluster, o.ResourceVersion = "consumer", strconv.Itoa(f.rv)
		f.vpcs[o.Namespace+"/"+o.Name] = &o
	}
	return f
}

func (f *fakeObjects) State(src index.Source) index.State {
	if p, ok := f.states[src]; ok {
		return index.State{Phase: p}
	}
	return index.State{Phase: index.PhaseSynced, Namespaced: true}
}

func (f *fakeObjects) refs(names []string, name string) []kcp.Meta {
	if slices.Contains(names, name) {
		return []kcp.Meta{{Cluster: "consumer", Namespace: "default", Name: "vm-of-" + name}}
	}
	return nil
}

func (f *fakeObjects) Hits(src index.Source, _ []fieldpath.Reference, _ logicalcluster.Name, _, name string) []kcp.Meta {
	if src != vmSrc {
		return nil
	}
	return f.refs(f.indexed, name)
}

func (f *fakeObjects) Confirm(_ context.Context, src index.Source, _ []fieldpath.Reference, _ logicalcluster.Name, _, name string) ([]kcp.Meta, int, error) {
	f.calls = append(f.calls, "confirm "+name)
	return f.refs(f.live, name), 1, nil
}

func (f *fakeObjects) ListObjects(_ context.Context, src index.Source, selector string, visit func(kcp.Meta) error) error {
	f.calls = append(f.calls, fmt.Sprintf("list %s %q", src.Resource.Resource, selector))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range f.vpcs {
			if !yield(k) {
				return
			}
		}
	}) {
		o := f.vpcs[k]
		if selector == depv1alpha1.LabelUnreferenced && o.Unreferenced == "" {
			continue
		}
		if err := visit(o.Meta); err != nil {
			return err
		}
	}
	return nil
}

// Patch applies the cleaner's merge patches of the label and annotation,
// honouring the resourceVersion precondition.
func (f *fakeObjects) Patch(_ context.Context, _ index.Source, _ logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) error {
	var patch labelPatch
	if err := json.Unmarshal(body, &patch); err != nil {
		return fmt.Errorf("bad patch %s: %w", body, err)
	}
	if pt != types.MergePatchType {
		return fmt.Errorf("patch of type %s, want a merge patch", pt)
	}
	label := "-"
	if v := patch.Metadata.Labels[depv1alpha1.LabelUnreferenced]; v != nil {
		label = *v
	}
	f.calls = append(f.calls, fmt.Sprintf("patch %s %s rv=%s", name, label, patch.Metadata.ResourceVersion))
	if f.patchErr != nil {
		return f.patchErr
	}
	o, ok := f.vpcs[namespace+"/"+name]
	if !ok {
		return apierrors.NewNotFound(vpcs.GroupResource(), name)
	}
	if rv := patch.Metadata.ResourceVersion; rv != "" && (rv != o.ResourceVersion || f.conflictOnce) {
		f.conflictOnce = false
		return apierrors.NewConflict(vpcs.GroupResource(), name, errors.New("the object has been modified"))
	}
	o.Unreferenced = strings.TrimPrefix(label, "-")
	if since, ok := patch.Metadata.Annotations[depv1alpha1.AnnotationUnreferencedSince]; ok {
		o.since = ""
		if since != nil {
			o.since = *since
		}
	}
	f.rv++
	o.ResourceVersion = strconv.Itoa(f.rv)
	return nil
}

// touch changes a VPC as someone else would, e.g. the reference guard
// removing its mark.
func (f *fakeObjects) touch(name string, label string) {
	o := f.vpcs["default/"+name]
	o.Unreferenced = label
	f.rv++
	o.ResourceVersion = strconv.Itoa(f.rv)
}

// fakeFinalizers records finalizers added and removed.
type fakeFinalizers struct {
	calls []string
	err   error
}

func (f *fakeFinalizers) Add(_ context.Context, rule kcp.ObjectKey, _ types.UID) error {
	f.calls = append(f.calls, "add "+rule.Name)
	return f.err
}

func (f *fakeFinalizers) Remove(_ context.Context, rule kcp.ObjectKey, _ types.UID) error {
	f.calls = append(f.calls, "remove "+rule.Name)
	return f.err
}

// fakeMetrics counts by state or reason.
type fakeMetrics map[string]int

func (m fakeMetrics) Marked(state string)    { m["marked "+state]++ }
func (m fakeMetrics) Unmarked(reason string) { m["unmarked "+reason]++ }

// clock is a fake clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func newCleaner(rules *fakeRules, objs *fakeObjects, fin *fakeFinalizers, c *clock, m fakeMetrics) *Cleaner {
	return New(rules, loaded(true), objs, fin, Options{Delay: delay, Interval: time.Second, Now: c.Now, Metrics: m})
}

func pass(t *testing.T, cl *Cleaner) {
	t.Helper()
	if err := cl.Pass(context.Background()); err != nil {
		t.Fatalf("Pass: %v", err)
	}
}

func label(objs *fakeObjects, name string) string {
	return objs.vpcs["default/"+name].Unreferenced
}

// An object nothing references: pending, then cleared once it kept the
// pending mark, unchanged, for the delay counted from when the cleaner saw
// it, and a live read found nothing.
func TestCleanerClearsAnUnreferencedObject(t *testing.T) {
	objs := newObjects(object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-a", UID: "u-a"}})
	c := &clock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m := fakeMetrics{}
	cl := newCleaner(&fakeRules{protections: []registry.Protection{protection(vmRule())}}, objs, &fakeFinalizers{}, c, m)

	pass(t, cl)
	if got := label(objs, "vpc-a"); got != marks.Pending(fp) {
		t.Fatalf("after the first pass: label %q, want %q", got, marks.Pending(fp))
	}
	if got := objs.vpcs["default/vpc-a"].since; got != "2026-11-24T12:00:00Z" {
		t.Errorf("since = %q", got)
	}
	// The write carried the version the decision was made on.
	if !slices.Contains(objs.calls, "patch vpc-a pending-"+fp+" rv=100") {
		t.Errorf("calls %q lack the pending write with its precondition", objs.calls)
	}

	pass(t, cl) // sees the pending mark: the delay starts now
	c.now = c.now.Add(delay - time.Second)
	pass(t, cl)
	if got := label(objs, "vpc-a"); got != marks.Pending(fp) {
		t.Fatalf("before the delay: label %q, want it pending", got)
	}
	if slices.ContainsFunc(objs.calls, func(s string) bool { return strings.HasPrefix(s, "confirm") }) {
		t.Fatalf("read live before the delay: %q", objs.calls)
	}
	c.now = c.now.Add(time.Second)
	pass(t, cl)
	if got := label(objs, "vpc-a"); got != fp {
		t.Fatalf("after the delay: label %q, want the clearance %q", got, fp)
	}
	if !slices.Contains(objs.calls, "confirm vpc-a") || !slices.Contains(objs.calls, "patch vpc-a "+fp+" rv=101") {
		t.Errorf("calls %q lack the live read or the clearance with the precondition of the pending mark", objs.calls)
	}
	if m["marked pending"] != 1 || m["marked cleared"] != 1 {
		t.Errorf("metrics %v", m)
	}

	// Cleared stays cleared, without writes.
	n := len(objs.calls)
	pass(t, cl)
	for _, call := range objs.calls[n:] {
		if strings.HasPrefix(call, "patch") || strings.HasPrefix(call, "confirm") {
			t.Errorf("a cleared object was written or read: %q", call)
		}
	}
}

func TestCleanerSteps(t *testing.T) {
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// label is the VPC's mark before the passes.
		label string
		// indexed and live say whether the index and a live read find a
		// reference.
		indexed, live bool
		// prepare runs after the first pass (which records a pending mark
		// as seen), before the second, at start+delay.
		prepare   func(objs *fakeObjects)
		wantLabel string
		wantCalls []string
		metric    string
	}{
		{
			name: "an object the index finds referenced is not marked", indexed: true,
			wantLabel: "",
			wantCalls: []string{`list vpcs ""`, `list vpcs ""`},
		},
		{
			name: "a mark of another fingerprint (the rules changed) is replaced by a pending mark", label: "fedcba9876543210",
			wantLabel: marks.Pending(fp),
			wantCalls: []string{`list vpcs ""`, "patch vpc-a pending-" + fp + " rv=100", `list vpcs ""`},
			metric:    "marked pending",
		},
		{
			name: "a pending mark of another fingerprint is replaced", label: marks.Pending("fedcba9876543210"),
			wantLabel: marks.Pending(fp),
			wantCalls: []string{`list vpcs ""`, "patch vpc-a pending-" + fp + " rv=100", `list vpcs ""`},
			metric:    "marked pending",
		},
		{
			name: "a clearance of an object the index finds referenced is removed", label: fp, indexed: true,
			wantLabel: "",
			wantCalls: []string{`list vpcs ""`, "patch vpc-a - rv=", `list vpcs ""`},
			metric:    "unmarked referenced",
		},
		{
			name: "a pending mark whose live read finds a reference is removed", label: marks.Pending(fp), live: true,
			wantLabel: "",
			wantCalls: []string{`list vpcs ""`, `list vpcs ""`, "confirm vpc-a", "patch vpc-a - rv="},
			metric:    "unmarked referenced",
		},
		{
			name: "a pending mark that changed meanwhile (the guard removed it and it was marked again) starts the delay anew", label: marks.Pending(fp),
			prepare:   func(objs *fakeObjects) { objs.touch("vpc-a", marks.Pending(fp)) },
			wantLabel: marks.Pending(fp),
			wantCalls: []string{`list vpcs ""`, `list vpcs ""`},
		},
		{
			name: "a promotion that conflicts (the object changed after the live read started) is left for the next pass", label: marks.Pending(fp),
			prepare:   func(objs *fakeObjects) { objs.conflictOnce = true },
			wantLabel: marks.Pending(fp),
			wantCalls: []string{`list vpcs ""`, `list vpcs ""`, "confirm vpc-a", "patch vpc-a " + fp + " rv=100"},
		},
		{
			name: "an object being deleted is left alone", label: marks.Pending(fp),
			prepare:   func(objs *fakeObjects) { objs.vpcs["default/vpc-a"].Terminating = true },
			wantLabel: marks.Pending(fp),
			wantCalls: []string{`list vpcs ""`, `list vpcs ""`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := newObjects(object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-a", UID: "u-a", Unreferenced: tt.label}})
			if tt.indexed {
				objs.indexed = []string{"vpc-a"}
			}
			if tt.live {
				objs.live = []string{"vpc-a"}
			}
			c := &clock{now: start}
			m := fakeMetrics{}
			cl := newCleaner(&fakeRules{protections: []registry.Protection{protection(vmRule())}}, objs, &fakeFinalizers{}, c, m)
			pass(t, cl)
			c.now = start.Add(delay)
			if tt.prepare != nil {
				tt.prepare(objs)
			}
			pass(t, cl)
			if got := label(objs, "vpc-a"); got != tt.wantLabel {
				t.Errorf("label = %q, want %q", got, tt.wantLabel)
			}
			if !slices.Equal(objs.calls, tt.wantCalls) {
				t.Errorf("calls =\n  %q\nwant\n  %q", objs.calls, tt.wantCalls)
			}
			if tt.metric != "" && m[tt.metric] != 1 {
				t.Errorf("metrics = %v, want one %s", m, tt.metric)
			}
		})
	}
}

// Nothing is marked unless every dependent type is indexed on every shard
// and the objects can be read; marks of another fingerprint are removed
// meanwhile, those of the current one stay.
func TestCleanerWaitsForTheIndex(t *testing.T) {
	tests := []struct {
		name      string
		states    map[index.Source]index.Phase
		wantCalls []string
	}{
		{
			name:      "dependents still syncing: stale marks go, the current ones stay",
			states:    map[index.Source]index.Phase{vmSrc: index.PhaseSyncing},
			wantCalls: []string{`list vpcs "dependencies.opendefense.cloud/unreferenced"`, "patch vpc-stale - rv="},
		},
		{
			name:   "objects not readable (the provider revoked the grant): nothing is read or written",
			states: map[index.Source]index.Phase{targetSrc: index.PhaseAccessDenied},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := newObjects(
				object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-free"}},
				object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-current", Unreferenced: fp}},
				object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-stale", Unreferenced: "fedcba9876543210"}},
			)
			objs.states = tt.states
			fin := &fakeFinalizers{}
			cl := newCleaner(&fakeRules{protections: []registry.Protection{protection(vmRule())}}, objs, fin, &clock{}, fakeMetrics{})
			pass(t, cl)
			if !slices.Equal(objs.calls, tt.wantCalls) {
				t.Errorf("calls =\n  %q\nwant\n  %q", objs.calls, tt.wantCalls)
			}
			if label(objs, "vpc-free") != "" || label(objs, "vpc-current") != fp {
				t.Errorf("labels changed: free %q, current %q", label(objs, "vpc-free"), label(objs, "vpc-current"))
			}
			if len(fin.calls) > 0 {
				t.Errorf("finalizers changed: %q", fin.calls)
			}
		})
	}
}

// The finalizer goes on every rule before the first mark is written; a
// rule being deleted has every mark of its resources removed, whatever the
// fingerprint, and then loses the finalizer.
func TestCleanerFinalizers(t *testing.T) {
	t.Run("added before marking; marking waits if it fails", func(t *testing.T) {
		objs := newObjects(object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-a"}})
		rule := vmRule()
		rule.Finalized = false
		fin := &fakeFinalizers{err: apierrors.NewForbidden(schema.GroupResource{Resource: "dependencyrules"}, "vm-rule", errors.New("no"))}
		cl := newCleaner(&fakeRules{protections: []registry.Protection{protection(rule)}}, objs, fin, &clock{}, fakeMetrics{})
		if err := cl.Pass(context.Background()); err == nil || !strings.Contains(err.Error(), depv1alpha1.FinalizerMarks) {
			t.Errorf("Pass error = %v, want one naming the finalizer", err)
		}
		if len(objs.calls) > 0 {
			t.Errorf("objects read or written without the finalizer: %q", objs.calls)
		}
		fin.err = nil
		pass(t, cl)
		if !slices.Equal(fin.calls, []string{"add vm-rule", "add vm-rule"}) || label(objs, "vpc-a") != marks.Pending(fp) {
			t.Errorf("finalizer calls %q, label %q", fin.calls, label(objs, "vpc-a"))
		}
	})

	t.Run("a rule being deleted: every mark goes, then the finalizer", func(t *testing.T) {
		objs := newObjects(
			object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-cleared", Unreferenced: fp}},
			object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-pending", Unreferenced: marks.Pending(fp)}},
			object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-free"}},
		)
		rule := vmRule()
		rule.Terminating = true
		fin := &fakeFinalizers{}
		m := fakeMetrics{}
		cl := newCleaner(&fakeRules{protections: []registry.Protection{protection(rule)}, rules: []*registry.Rule{rule}}, objs, fin, &clock{}, m)
		objs.patchErr = errors.New("connection refused")
		if err := cl.Pass(context.Background()); err == nil {
			t.Fatal("Pass succeeded though no mark could be removed")
		}
		if len(fin.calls) > 0 {
			t.Fatalf("the finalizer was removed before the marks: %q", fin.calls)
		}
		objs.patchErr = nil
		pass(t, cl)
		for _, name := range []string{"vpc-cleared", "vpc-pending", "vpc-free"} {
			if got := label(objs, name); got != "" {
				t.Errorf("%s keeps the mark %q", name, got)
			}
		}
		if !slices.Equal(fin.calls, []string{"remove vm-rule"}) {
			t.Errorf("finalizer calls %q, want its removal", fin.calls)
		}
		if m["unmarked stale"] != 2 {
			t.Errorf("metrics %v, want 2 stale marks removed", m)
		}
	})

	t.Run("a rule being deleted whose objects cannot be read loses the finalizer", func(t *testing.T) {
		rule := vmRule()
		rule.Terminating = true
		objs := newObjects()
		objs.states = map[index.Source]index.Phase{targetSrc: index.PhaseAccessDenied}
		fin := &fakeFinalizers{}
		cl := newCleaner(&fakeRules{protections: []registry.Protection{protection(rule)}, rules: []*registry.Rule{rule}}, objs, fin, &clock{}, fakeMetrics{})
		pass(t, cl)
		if !slices.Equal(fin.calls, []string{"remove vm-rule"}) {
			t.Errorf("finalizer calls %q", fin.calls)
		}
	})

	t.Run("a rule being deleted that protects nothing resolvable loses the finalizer", func(t *testing.T) {
		rule := vmRule()
		rule.Terminating = true
		fin := &fakeFinalizers{}
		cl := newCleaner(&fakeRules{rules: []*registry.Rule{rule}}, newObjects(), fin, &clock{}, fakeMetrics{})
		pass(t, cl)
		if !slices.Equal(fin.calls, []string{"remove vm-rule"}) {
			t.Errorf("finalizer calls %q", fin.calls)
		}
	})
}

// Before the rules are loaded, fingerprints may miss rules: nothing happens.
func TestCleanerWaitsForTheRules(t *testing.T) {
	objs := newObjects(object{Meta: kcp.Meta{Namespace: "default", Name: "vpc-a"}})
	fin := &fakeFinalizers{}
	cl := New(&fakeRules{protections: []registry.Protection{protection(vmRule())}}, loaded(false), objs, fin, Options{Delay: delay})
	pass(t, cl)
	if len(objs.calls)+len(fin.calls) > 0 {
		t.Errorf("acted before the rules were loaded: %q %q", objs.calls, fin.calls)
	}
	if !cl.NeedLeaderElection() {
		t.Error("the cleaner must run on the leader only")
	}
}
