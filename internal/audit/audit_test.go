package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/index/store"
	"github.com/opendefensecloud/dependency-controller/internal/index/targets"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

var (
	vms      = index.Source{Export: kcp.ObjectKey{Cluster: "compute", Name: "compute.io"}, Resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}}
	gateways = index.Source{Export: kcp.ObjectKey{Cluster: "compute", Name: "compute.io"}, Resource: schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "gateways"}}
	vpcs     = index.Source{Export: kcp.ObjectKey{Cluster: "network", Name: "network.io"}, Resource: schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}}
	routers  = index.Source{Export: kcp.ObjectKey{Cluster: "network", Name: "network.io"}, Resource: schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "routers"}}

	vpcRef   = fieldpathtest.MustParse(".spec.vpcRef.name")
	routerAt = fieldpathtest.MustParse(".spec.router")
	gwVPC    = fieldpathtest.MustParse(".spec.vpc")
	// vpcInNS reads a namespace next to the name.
	vpcInNS = fieldpathtest.MustParseReference(fieldpath.ReferenceSpec{Path: ".spec.peer.name", NamespacePath: "namespace"})

	vmRule = kcp.ObjectKey{Cluster: "compute", Name: "vm-references"}
	gwRule = kcp.ObjectKey{Cluster: "compute", Name: "gateway-references"}
)

// fakeRules are the rules of the tests: VMs reference VPCs (at .spec.vpcRef.name
// and, with a namespace, at .spec.peer) and routers; Gateways
// (cluster-scoped) reference VPCs.
type fakeRules struct {
	rules  []*registry.Rule
	guards map[kcp.ObjectKey]registry.Guard
}

func newFakeRules() *fakeRules {
	r := &fakeRules{guards: map[kcp.ObjectKey]registry.Guard{}}
	r.add(vmRule, vms, "VirtualMachine", registry.GuardReference{Path: vpcRef, Target: vpcs}, registry.GuardReference{Path: vpcInNS, Target: vpcs},
		registry.GuardReference{Path: routerAt, Target: routers})
	r.add(gwRule, gateways, "Gateway", registry.GuardReference{Path: gwVPC, Target: vpcs})
	return r
}

func (r *fakeRules) add(key kcp.ObjectKey, dependent index.Source, kind string, refs ...registry.GuardReference) {
	r.rules = append(r.rules, &registry.Rule{Key: key, Dependent: dependent, DependentKind: kind})
	r.guards[key] = registry.Guard{Rule: key, Dependent: dependent, References: refs}
}

func (r *fakeRules) Rules() []*registry.Rule { return r.rules }

func (r *fakeRules) GuardOf(key kcp.ObjectKey) (registry.Guard, bool) {
	g, ok := r.guards[key]
	return g, ok
}

// fakeIndex holds the dependents of VMs and Gateways in stores, as the
// index does, and the VPCs and routers in sets of targets.
type fakeIndex struct {
	states   map[index.Source]index.State
	paths    map[index.Source][]fieldpath.Reference
	stores   map[index.Source]*store.Store
	sets     map[index.Source]*targets.Set
	unknown  map[index.Source]bool
	watching bool
	contents chan struct{}
}

func newFakeIndex() *fakeIndex {
	ix := &fakeIndex{
		states: map[index.Source]index.State{
			vms: {Phase: index.PhaseSynced, Namespaced: true, Listed: true}, gateways: {Phase: index.PhaseSynced, Listed: true},
			vpcs: {Phase: index.PhaseSynced, Namespaced: true}, routers: {Phase: index.PhaseSynced},
		},
		paths:   map[index.Source][]fieldpath.Reference{vms: {vpcInNS, vpcRef, routerAt}, gateways: {gwVPC}},
		stores:  map[index.Source]*store.Store{vms: store.New(nil), gateways: store.New(nil)},
		sets:    map[index.Source]*targets.Set{vpcs: targets.New(nil, nil), routers: targets.New(nil, nil)},
		unknown: map[index.Source]bool{}, contents: make(chan struct{}, 1),
	}
	for _, s := range ix.sets {
		if err := s.ForShard("https://shard-1", func() {}).Replace(nil, "1"); err != nil {
			panic(err)
		}
	}
	return ix
}

func (ix *fakeIndex) State(src index.Source) index.State { return ix.states[src] }

func (ix *fakeIndex) Holders(src index.Source, fn func([]fieldpath.Reference, *index.Holder)) bool {
	st, ok := ix.stores[src]
	if !ok {
		return false
	}
	st.Each(func(h *index.Holder) { fn(ix.paths[src], h) })
	return true
}

func (ix *fakeIndex) Existing(src index.Source) (index.Existence, bool) {
	if st, ok := ix.stores[src]; ok {
		return st, ix.states[src].Phase == index.PhaseSynced
	}
	set, ok := ix.sets[src]
	if !ok {
		return nil, false
	}
	return set, ix.watching && !ix.unknown[src] && ix.states[src].Phase == index.PhaseSynced
}

func (ix *fakeIndex) WatchTargets(on bool) { ix.watching = on }

func (ix *fakeIndex) Contents() <-chan struct{} { return ix.contents }

// object is "cluster/namespace/name" or "cluster/name" (cluster-scoped).
func object(s string) (cluster, namespace, name string) {
	parts := strings.Split(s, "/")
	if len(parts) == 2 {
		return parts[0], "", parts[1]
	}
	return parts[0], parts[1], parts[2]
}

// putDependent stores a dependent of src with the spec (JSON).
func (ix *fakeIndex) putDependent(t *testing.T, src index.Source, obj, spec string) {
	t.Helper()
	cluster, ns, name := object(obj)
	raw := fmt.Sprintf(`{"metadata":{"name":%q,"namespace":%q,"uid":"uid-%s","annotations":{"kcp.io/cluster":%q}},"spec":%s}`, name, ns, name, cluster, spec)
	o, err := store.Decode([]byte(raw), ix.paths[src])
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.stores[src].ForShard("https://shard-1", func() {}).Add(o); err != nil {
		t.Fatal(err)
	}
}

func (ix *fakeIndex) deleteDependent(t *testing.T, src index.Source, obj string) {
	t.Helper()
	cluster, ns, name := object(obj)
	o := &store.Object{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Cluster: logicalcluster.Name(cluster)}
	if err := ix.stores[src].ForShard("https://shard-1", func() {}).Delete(o); err != nil {
		t.Fatal(err)
	}
}

// target adds (or, with remove, deletes) a target of src.
func (ix *fakeIndex) target(t *testing.T, src index.Source, obj string, remove bool) {
	t.Helper()
	cluster, ns, name := object(obj)
	o := &store.Object{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Cluster: logicalcluster.Name(cluster)}
	rs := ix.sets[src].ForShard("https://shard-1", func() {})
	var err error
	if remove {
		err = rs.Delete(o)
	} else {
		err = rs.Add(o)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// fakeWriter keeps the last condition written per rule.
type fakeWriter struct {
	conditions map[kcp.ObjectKey]metav1.Condition
	writes     int
}

func (w *fakeWriter) write(_ context.Context, rule kcp.ObjectKey, c func(int64) metav1.Condition) error {
	w.writes++
	w.conditions[rule] = c(1)
	return nil
}

// fakeEvents records Events; err, if set, fails them.
type fakeEvents struct {
	lock   sync.Mutex
	events []string
	err    error
	tries  int
}

func (e *fakeEvents) Event(_ context.Context, src index.Source, kind string, obj kcp.Meta, eventType, reason, msg string) error {
	e.lock.Lock()
	defer e.lock.Unlock()
	e.tries++
	if e.err != nil {
		return e.err
	}
	e.events = append(e.events, fmt.Sprintf("%s %s on %s %s/%s/%s (%s, %s): %s", eventType, reason, src.Resource.Resource, obj.Cluster, obj.Namespace, obj.Name, kind, obj.UID, msg))
	return nil
}

// harness is an Auditor over the fakes, with a clock the test moves.
type harness struct {
	t       *testing.T
	ix      *fakeIndex
	rules   *fakeRules
	writer  *fakeWriter
	events  *fakeEvents
	metrics *Metrics
	a       *Auditor
	clock   time.Time
}

const grace = time.Minute

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, ix: newFakeIndex(), rules: newFakeRules(), writer: &fakeWriter{conditions: map[kcp.ObjectKey]metav1.Condition{}},
		events: &fakeEvents{}, metrics: NewMetrics(), clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.a = New(h.rules, h.ix, h.events, h.writer.write, Options{GracePeriod: grace, Metrics: h.metrics})
	h.a.now = func() time.Time { return h.clock }
	h.a.started = h.clock
	h.ix.WatchTargets(true)
	return h
}

// pass moves the clock by d and runs a pass.
func (h *harness) pass(d time.Duration) {
	h.clock = h.clock.Add(d)
	h.a.pass(context.Background())
}

// condition returns the condition last written on rule, if any.
func (h *harness) condition(rule kcp.ObjectKey) (metav1.Condition, bool) {
	c, ok := h.writer.conditions[rule]
	return c, ok
}

func (h *harness) expectCondition(rule kcp.ObjectKey, status metav1.ConditionStatus, reason string, parts ...string) {
	h.t.Helper()
	c, ok := h.condition(rule)
	if !ok {
		h.t.Fatalf("no condition on %s", rule)
	}
	if c.Type != depv1alpha1.ConditionReferencesResolved || c.Status != status || c.Reason != reason {
		h.t.Errorf("%s: %s %s %q, want %s %s", rule, c.Status, c.Reason, c.Message, status, reason)
	}
	for _, p := range parts {
		if !strings.Contains(c.Message, p) {
			h.t.Errorf("%s: message %q does not contain %q", rule, c.Message, p)
		}
	}
}

func (h *harness) dangling(src index.Source) float64 {
	h.t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h.metrics)
	families, err := reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource" && l.GetValue() == src.Resource.GroupResource().String() {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	h.t.Fatalf("no dangling_references series of %s", src)
	return 0
}

// A reference to a missing object is reported after the grace period, on
// the rule, in the metric and with one Event; cleared once the object
// exists; reported again, with a new Event, once it is gone again for the
// grace period.
func TestDanglingReferenceLifecycle(t *testing.T) {
	h := newHarness(t)
	h.ix.target(t, vpcs, "c1/default/vpc-a", false)
	h.ix.putDependent(t, vms, "c1/default/vm-ok", `{"vpcRef":{"name":"vpc-a"}}`)
	h.ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-x"}}`)

	steps := []struct {
		name  string
		after time.Duration
		do    func()
		// status is the condition of the VM rule; "" if none written yet.
		status   metav1.ConditionStatus
		reason   string
		parts    []string
		events   int
		dangling float64
	}{
		{name: "found missing in the first pass: it may have been missing for long, so no True is written", status: "", events: 0, dangling: 0},
		{name: "within the grace period", after: grace - time.Second, status: "", events: 0, dangling: 0},
		{name: "after the grace period", after: time.Second, status: metav1.ConditionFalse, reason: depv1alpha1.ReasonDangling,
			parts: []string{"1 reference names an object that does not exist (missing for 1m0s or longer): VirtualMachine/default/vm-1 -> vpcs default/vpc-x"}, events: 1, dangling: 1},
		{name: "still dangling: no second Event", after: 10 * time.Second, status: metav1.ConditionFalse, reason: depv1alpha1.ReasonDangling, events: 1, dangling: 1},
		{name: "the VPC appears: cleared", after: time.Second, do: func() { h.ix.target(t, vpcs, "c1/default/vpc-x", false) },
			status: metav1.ConditionTrue, reason: depv1alpha1.ReasonAllResolved, parts: []string{"reported after 1m0s"}, events: 1, dangling: 0},
		{name: "gone again: not reported within the grace period", after: time.Second, do: func() { h.ix.target(t, vpcs, "c1/default/vpc-x", true) },
			status: metav1.ConditionTrue, reason: depv1alpha1.ReasonAllResolved, events: 1, dangling: 0},
		{name: "gone again for the grace period: reported, with a new Event", after: grace, status: metav1.ConditionFalse, reason: depv1alpha1.ReasonDangling, events: 2, dangling: 1},
		{name: "the dependent is deleted: cleared", after: time.Second, do: func() { h.ix.deleteDependent(t, vms, "c1/default/vm-1") },
			status: metav1.ConditionTrue, reason: depv1alpha1.ReasonAllResolved, events: 2, dangling: 0},
	}
	for _, s := range steps {
		if s.do != nil {
			s.do()
		}
		h.pass(s.after)
		c, written := h.condition(vmRule)
		switch {
		case s.status == "" && written:
			t.Errorf("%s: condition written: %+v", s.name, c)
		case s.status != "" && (!written || c.Status != s.status || c.Reason != s.reason):
			t.Errorf("%s: condition %+v (written %v), want %s %s", s.name, c, written, s.status, s.reason)
		}
		for _, p := range s.parts {
			if !strings.Contains(c.Message, p) {
				t.Errorf("%s: message %q does not contain %q", s.name, c.Message, p)
			}
		}
		if len(h.events.events) != s.events {
			t.Errorf("%s: %d Events, want %d: %v", s.name, len(h.events.events), s.events, h.events.events)
		}
		if got := h.dangling(vms); got != s.dangling {
			t.Errorf("%s: dangling_references = %v, want %v", s.name, got, s.dangling)
		}
	}
	want := `Warning DanglingReference on virtualmachines c1/default/vm-1 (VirtualMachine, uid-vm-1): VirtualMachine/default/vm-1 references vpcs.network.io "vpc-x" in namespace "default", which does not exist`
	for i, e := range h.events.events {
		if e != want {
			t.Errorf("Event %d = %q, want %q", i, e, want)
		}
	}
	// The Gateway rule was checked all along and found nothing.
	h.expectCondition(gwRule, metav1.ConditionTrue, depv1alpha1.ReasonAllResolved)
}

// A dependent created after the audit's first check of its type is found
// missing only from then on: the rule stays True within the grace period.
func TestANewDanglingReferenceWaitsForTheGracePeriod(t *testing.T) {
	h := newHarness(t)
	h.pass(0)
	h.expectCondition(vmRule, metav1.ConditionTrue, depv1alpha1.ReasonAllResolved)
	h.ix.putDependent(t, vms, "c1/default/vm-early", `{"vpcRef":{"name":"vpc-later"}}`)
	h.pass(10 * time.Second)
	h.expectCondition(vmRule, metav1.ConditionTrue, depv1alpha1.ReasonAllResolved)
	// Created within the grace period: never reported.
	h.ix.target(t, vpcs, "c1/default/vpc-later", false)
	h.pass(grace)
	h.expectCondition(vmRule, metav1.ConditionTrue, depv1alpha1.ReasonAllResolved)
	if len(h.events.events) != 0 {
		t.Errorf("Events for a reference resolved within the grace period: %v", h.events.events)
	}
}

// How a reference names its object: in the dependent's namespace, in the
// one it names, anywhere for a cluster-scoped type, and in any namespace
// for a cluster-scoped dependent's reference that names none. Samples and
// Events render each.
func TestWhatAReferenceNames(t *testing.T) {
	tests := []struct {
		name    string
		targets []string // "vpcs c1/ns/name" or "routers c1/name"
		src     index.Source
		obj     string
		spec    string
		// sample and event are what the condition and the Event say; empty
		// if the reference resolves.
		sample, event string
	}{
		{name: "the dependent's namespace", targets: []string{"vpcs c1/other/vpc-a"}, src: vms, obj: "c1/team/vm", spec: `{"vpcRef":{"name":"vpc-a"}}`,
			sample: "VirtualMachine/team/vm -> vpcs team/vpc-a", event: `VirtualMachine/team/vm references vpcs.network.io "vpc-a" in namespace "team", which does not exist`},
		{name: "the dependent's namespace, resolved", targets: []string{"vpcs c1/team/vpc-a"}, src: vms, obj: "c1/team/vm", spec: `{"vpcRef":{"name":"vpc-a"}}`},
		{name: "another workspace's object does not count", targets: []string{"vpcs c2/team/vpc-a"}, src: vms, obj: "c1/team/vm", spec: `{"vpcRef":{"name":"vpc-a"}}`,
			sample: "VirtualMachine/team/vm -> vpcs team/vpc-a"},
		{name: "the namespace the reference names", targets: []string{"vpcs c1/team/peer"}, src: vms, obj: "c1/team/vm", spec: `{"peer":{"name":"peer","namespace":"shared"}}`,
			sample: "VirtualMachine/team/vm -> vpcs shared/peer", event: `VirtualMachine/team/vm references vpcs.network.io "peer" in namespace "shared", which does not exist`},
		{name: "the namespace the reference names, resolved", targets: []string{"vpcs c1/shared/peer"}, src: vms, obj: "c1/team/vm", spec: `{"peer":{"name":"peer","namespace":"shared"}}`},
		{name: "a cluster-scoped type", src: vms, obj: "c1/team/vm", spec: `{"router":"core"}`,
			sample: "VirtualMachine/team/vm -> routers core", event: `VirtualMachine/team/vm references routers.network.io "core", which does not exist`},
		{name: "a cluster-scoped type, resolved", targets: []string{"routers c1/core"}, src: vms, obj: "c1/team/vm", spec: `{"router":"core"}`},
		{name: "a cluster-scoped dependent, in any namespace", targets: []string{"vpcs c2/a/vpc-gw"}, src: gateways, obj: "c1/edge", spec: `{"vpc":"vpc-gw"}`,
			sample: "Gateway/edge -> vpcs vpc-gw in any namespace", event: `Gateway/edge references vpcs.network.io "vpc-gw" in any namespace, which does not exist`},
		{name: "a cluster-scoped dependent, resolved in some namespace", targets: []string{"vpcs c1/a/vpc-gw"}, src: gateways, obj: "c1/edge", spec: `{"vpc":"vpc-gw"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.pass(0)
			for _, target := range tt.targets {
				res, obj, _ := strings.Cut(target, " ")
				h.ix.target(t, map[string]index.Source{"vpcs": vpcs, "routers": routers}[res], obj, false)
			}
			h.ix.putDependent(t, tt.src, tt.obj, tt.spec)
			h.pass(time.Second)
			h.pass(grace)
			rule := vmRule
			if tt.src == gateways {
				rule = gwRule
			}
			if tt.sample == "" {
				h.expectCondition(rule, metav1.ConditionTrue, depv1alpha1.ReasonAllResolved)
				if len(h.events.events) != 0 {
					t.Errorf("Events: %v", h.events.events)
				}
				return
			}
			h.expectCondition(rule, metav1.ConditionFalse, depv1alpha1.ReasonDangling, ": "+tt.sample)
			if tt.event != "" && (len(h.events.events) != 1 || !strings.HasSuffix(h.events.events[0], ": "+tt.event)) {
				t.Errorf("Events %v, want one saying %q", h.events.events, tt.event)
			}
		})
	}
}

// A condition names a few dangling references, sorted, and counts the rest;
// a reference held at two paths, or under two rules, counts once.
func TestConditionSamples(t *testing.T) {
	h := newHarness(t)
	h.pass(0)
	for i := range 7 {
		h.ix.putDependent(t, vms, fmt.Sprintf("c1/default/vm-%d", 6-i), fmt.Sprintf(`{"vpcRef":{"name":"vpc-%d"},"peer":{"name":"vpc-%d","namespace":"default"}}`, i, i))
	}
	h.pass(time.Second)
	h.pass(grace)
	h.expectCondition(vmRule, metav1.ConditionFalse, depv1alpha1.ReasonDangling,
		"7 references name objects that do not exist (missing for 1m0s or longer): "+
			"VirtualMachine/default/vm-0 -> vpcs default/vpc-6, VirtualMachine/default/vm-1 -> vpcs default/vpc-5, VirtualMachine/default/vm-2 -> vpcs default/vpc-4, "+
			"VirtualMachine/default/vm-3 -> vpcs default/vpc-3, VirtualMachine/default/vm-4 -> vpcs default/vpc-2 and 2 more")
	if len(h.events.events) != 7 || h.dangling(vms) != 7 {
		t.Errorf("%d Events, %v dangling; want 7 each", len(h.events.events), h.dangling(vms))
	}
}

// While the targets are not known completely (listing, a broken watch) the
// references to them are neither cleared nor newly found: what was found
// stays, with its Event, and the condition says Unknown only if nothing
// dangles. A type the webhook may not read makes the condition Unknown
// with that reason; a rule whose targets no workspace serves yet, Unknown.
func TestUnknownTargets(t *testing.T) {
	h := newHarness(t)
	h.a.started = h.clock.Add(-startupWait)
	h.ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-x"}}`)
	h.pass(0)
	h.pass(grace)
	h.expectCondition(vmRule, metav1.ConditionFalse, depv1alpha1.ReasonDangling)

	h.ix.unknown[vpcs] = true
	h.ix.target(t, vpcs, "c1/default/vpc-x", false)
	h.pass(time.Second)
	h.expectCondition(vmRule, metav1.ConditionFalse, depv1alpha1.ReasonDangling, "VirtualMachine/default/vm-1 -> vpcs default/vpc-x")
	h.ix.putDependent(t, vms, "c1/default/vm-2", `{"vpcRef":{"name":"vpc-y"}}`)
	h.pass(grace)
	h.expectCondition(vmRule, metav1.ConditionFalse, depv1alpha1.ReasonDangling, "1 reference names")
	h.ix.unknown[vpcs] = false
	h.pass(time.Second)
	// vpc-x resolved; vpc-y found missing from now on.
	h.expectCondition(vmRule, metav1.ConditionTrue, depv1alpha1.ReasonAllResolved)
	h.ix.deleteDependent(t, vms, "c1/default/vm-2")
	h.pass(time.Second)
	if len(h.events.events) != 1 {
		t.Errorf("Events: %v", h.events.events)
	}

	h.ix.unknown[vpcs] = true
	h.pass(time.Second)
	h.expectCondition(vmRule, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "the webhook is listing vpcs.network.io of the APIExport network/network.io")
	h.ix.states[routers] = index.State{Phase: index.PhaseAccessDenied, Message: "grant it"}
	h.ix.unknown[vpcs] = false
	h.pass(time.Second)
	h.expectCondition(vmRule, metav1.ConditionUnknown, depv1alpha1.ReasonAccessDenied, "cannot watch routers.network.io of the APIExport network/network.io (see ReferencesGuarded): grant it")
	h.ix.states[gateways] = index.State{Phase: index.PhaseSyncing}
	h.pass(time.Second)
	h.expectCondition(gwRule, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "the dependents (gateways.compute.io of the APIExport compute/compute.io) are not indexed yet")

	h.rules.guards[gwRule] = registry.Guard{Rule: gwRule, Dependent: gateways, References: []registry.GuardReference{{Path: gwVPC}}}
	h.pass(time.Second)
	h.expectCondition(gwRule, metav1.ConditionUnknown, depv1alpha1.ReasonTargetsUnresolved)
}

// Right after it started, an Auditor that is still listing the targets
// leaves the conditions as they are (a newly elected replica must not make
// them flap), and says Unknown only once that has taken long.
func TestStartupLeavesConditionsAlone(t *testing.T) {
	h := newHarness(t)
	h.ix.unknown[vpcs] = true
	h.pass(0)
	if _, ok := h.condition(vmRule); ok {
		t.Error("a condition written while the targets were being listed right after the start")
	}
	h.pass(startupWait)
	h.expectCondition(vmRule, metav1.ConditionUnknown, depv1alpha1.ReasonSyncing)
}

// An Event that cannot be recorded because the provider does not claim
// events (403) is not tried again; one that failed because kcp was busy
// is. A pass records at most MaxEvents, the oldest first.
func TestEvents(t *testing.T) {
	t.Run("not claimed", func(t *testing.T) {
		h := newHarness(t)
		h.events.err = apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", errors.New("no claim"))
		h.ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-x"}}`)
		h.pass(0)
		h.pass(grace)
		h.pass(time.Second)
		if h.events.tries != 1 {
			t.Errorf("%d tries, want 1", h.events.tries)
		}
	})
	t.Run("busy", func(t *testing.T) {
		h := newHarness(t)
		h.events.err = apierrors.NewServiceUnavailable("storage is (re)initializing")
		h.ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-x"}}`)
		h.pass(0)
		h.pass(grace)
		h.events.err = nil
		h.pass(time.Second)
		h.pass(time.Second)
		if h.events.tries != 2 || len(h.events.events) != 1 {
			t.Errorf("%d tries, %d Events; want 2 tries and one Event", h.events.tries, len(h.events.events))
		}
	})
	t.Run("at most MaxEvents a pass", func(t *testing.T) {
		h := newHarness(t)
		h.a.opts.MaxEvents = 2
		h.pass(0)
		for i := range 5 {
			h.ix.putDependent(t, vms, fmt.Sprintf("c1/default/vm-%d", i), fmt.Sprintf(`{"vpcRef":{"name":"vpc-%d"}}`, i))
			h.pass(time.Second)
		}
		h.pass(grace)
		if len(h.events.events) != 2 || !strings.Contains(h.events.events[0], "vm-0") || !strings.Contains(h.events.events[1], "vm-1") {
			t.Errorf("first pass: %v", h.events.events)
		}
		h.pass(time.Second)
		h.pass(time.Second)
		h.pass(time.Second)
		if len(h.events.events) != 5 {
			t.Errorf("after three more passes: %d Events", len(h.events.events))
		}
	})
}

// Without a writer (a shard-affine webhook) nothing is written, and
// without an Eventer no Event; the metric is reported all the same, 0 for
// a type without dangling references.
func TestWithoutWriterAndEvents(t *testing.T) {
	ix, rules, metrics := newFakeIndex(), newFakeRules(), NewMetrics()
	a := New(rules, ix, nil, nil, Options{GracePeriod: grace, Metrics: metrics})
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return clock }
	ix.WatchTargets(true)
	ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-x"}}`)
	a.pass(context.Background())
	clock = clock.Add(grace)
	a.pass(context.Background())
	const want = `
# HELP dependency_webhook_dangling_references References that the dependents of each type (source) hold to objects that have not existed for the grace period (--dangling-grace-period) or longer, as of the audit's last pass; reported by the replica that runs the audit (the elected one).
# TYPE dependency_webhook_dangling_references gauge
dependency_webhook_dangling_references{export="compute/compute.io",resource="gateways.compute.io",version="v1"} 0
dependency_webhook_dangling_references{export="compute/compute.io",resource="virtualmachines.compute.io",version="v1"} 1
`
	if err := testutil.CollectAndCompare(metrics, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// The next pass is due when the grace period of a reference found missing
// ends, if that comes before the interval.
func TestNextPass(t *testing.T) {
	h := newHarness(t)
	if got := h.a.next(h.clock); got != DefaultInterval {
		t.Errorf("nothing missing: next pass in %s, want the interval", got)
	}
	h.ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-x"}}`)
	h.pass(0)
	if got := h.a.next(h.clock); got != DefaultInterval {
		t.Errorf("grace period ends after the interval: next pass in %s", got)
	}
	h.clock = h.clock.Add(grace - 3*time.Second)
	if got := h.a.next(h.clock); got != 3*time.Second {
		t.Errorf("grace period ends in 3s: next pass in %s", got)
	}
	h.pass(3 * time.Second)
	if got := h.a.next(h.clock); got != DefaultInterval {
		t.Errorf("reported: next pass in %s, want the interval", got)
	}
}

// Start turns the watches of targets on, runs a pass at once and after a
// change of the index, and turns them off when it ends.
func TestStart(t *testing.T) {
	ix, rules, w := newFakeIndex(), newFakeRules(), &fakeWriter{conditions: map[kcp.ObjectKey]metav1.Condition{}}
	var lock sync.Mutex
	writes := 0
	write := func(ctx context.Context, rule kcp.ObjectKey, c func(int64) metav1.Condition) error {
		lock.Lock()
		defer lock.Unlock()
		writes++
		return w.write(ctx, rule, c)
	}
	written := func() int {
		lock.Lock()
		defer lock.Unlock()
		return writes
	}
	a := New(rules, ix, nil, write, Options{GracePeriod: grace, Interval: time.Hour, Debounce: time.Millisecond})
	if !a.NeedLeaderElection() {
		t.Error("the Auditor must run on the elected replica only")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Start(ctx)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for written() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no pass at the start")
		}
		time.Sleep(time.Millisecond)
	}
	ix.contents <- struct{}{}
	for written() < 4 {
		if time.Now().After(deadline) {
			t.Fatal("no pass after a change of the index")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if ix.watching {
		t.Error("the targets are still watched after the Auditor ended")
	}
	if !slices.Contains(slices.Collect(func(yield func(kcp.ObjectKey) bool) {
		for k := range w.conditions {
			if !yield(k) {
				return
			}
		}
	}), vmRule) {
		t.Error("no condition on the VM rule")
	}
}

// Two providers serve VPCs, each with a rule on the VMs' .spec.vpcRef; a
// workspace binds one of them (kcp binds no two exports of one resource in
// a workspace). A reference that names a VPC of the export its workspace
// binds is not dangling under the other's rule; one that names no VPC is
// dangling under both.
func TestAReferenceResolvedUnderAnotherExportOfTheResourceIsNotDangling(t *testing.T) {
	otherVPCs := vpcs
	otherVPCs.Export = kcp.ObjectKey{Cluster: "network-2", Name: "network.io"}
	otherRule := kcp.ObjectKey{Cluster: "compute", Name: "vm-references-network-2"}
	h := newHarness(t)
	h.rules.add(otherRule, vms, "VirtualMachine", registry.GuardReference{Path: vpcRef, Target: otherVPCs})
	h.ix.states[otherVPCs] = h.ix.states[vpcs]
	h.ix.sets[otherVPCs] = targets.New(nil, nil)
	if err := h.ix.sets[otherVPCs].ForShard("https://shard-1", func() {}).Replace(nil, "1"); err != nil {
		t.Fatal(err)
	}
	h.ix.target(t, vpcs, "c1/default/vpc-a", false)
	h.ix.target(t, otherVPCs, "c2/default/vpc-b", false)
	h.ix.putDependent(t, vms, "c1/default/vm-1", `{"vpcRef":{"name":"vpc-a"}}`)
	h.ix.putDependent(t, vms, "c2/default/vm-2", `{"vpcRef":{"name":"vpc-b"}}`)
	h.ix.putDependent(t, vms, "c1/default/vm-3", `{"vpcRef":{"name":"vpc-x"}}`)

	h.pass(0)
	h.pass(grace + time.Second)
	for _, rule := range []kcp.ObjectKey{vmRule, otherRule} {
		c, ok := h.condition(rule)
		if !ok || c.Status != metav1.ConditionFalse {
			t.Fatalf("%s: condition %+v (written %v), want False", rule, c, ok)
		}
		if want := "1 reference names an object that does not exist"; !strings.Contains(c.Message, want) || !strings.Contains(c.Message, "vm-3") {
			t.Errorf("%s: message %q, want %q naming vm-3 alone", rule, c.Message, want)
		}
	}
	for _, e := range h.events.events {
		if !strings.Contains(e, "vm-3") {
			t.Errorf("an Event about a reference that names an object: %q", e)
		}
	}
	if len(h.events.events) != 2 {
		t.Errorf("%d Events, want one for vm-3 under each rule: %v", len(h.events.events), h.events.events)
	}
}
