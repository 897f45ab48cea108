package deletion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/inflight"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
	"github.com/opendefensecloud/dependency-controller/internal/webhook/webhooktest"
)

// labelledRules are staticRules whose dependents are labelled as
// labellings say.
type labelledRules struct {
	staticRules
	labellings map[registry.Target]registry.Labelling
}

func (r labelledRules) Labelling(t registry.Target) (registry.Labelling, bool) {
	l, ok := r.labellings[t]
	return l, ok
}

// fencingDependents is fakeDependents whose Fenced fails for the resources
// in fenceErr and NamespaceTerminating with nsErr, and that records the
// calls of both.
type fencingDependents struct {
	*fakeDependents
	fenceErr map[schema.GroupVersionResource]error
	fenced   []string
	// begun are the moments the calls of Fenced said the teardown had
	// begun by.
	begun   []time.Time
	nsErr   error
	nsAsked []string
}

func (f *fencingDependents) NamespaceTerminating(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string) (bool, error) {
	f.nsAsked = append(f.nsAsked, cluster.String()+"/"+namespace)
	if f.nsErr != nil {
		return false, f.nsErr
	}
	return f.fakeDependents.NamespaceTerminating(ctx, src, cluster, namespace)
}

func (f *fencingDependents) Fenced(ctx context.Context, q index.Query, begun time.Time) (bool, error) {
	f.fenced = append(f.fenced, q.Source.Resource.Resource)
	f.begun = append(f.begun, begun)
	if err := f.fenceErr[q.Source.Resource]; err != nil {
		return false, err
	}
	return f.fakeDependents.Fenced(ctx, q, begun)
}

func vmRefs(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }

func newMetrics() *webhook.Metrics {
	return webhook.NewMetrics()
}

// An item of kcp's teardown that the index holds no blocker of is allowed
// from the index for every dependent type the index is fenced for, and
// read live for every other; any other DELETE is read live.
func TestTeardownConfirmsWhatTheIndexIsNotFencedFor(t *testing.T) {
	rules := staticRules{vpcs.GroupResource(): {
		entry("provider/vm", vms, "VirtualMachine", ".spec.vpcRef.name"),
		entry("provider/db", dbs, "Database", ".spec.vpc"),
	}}
	// parentRules: VirtualMachines may reference VPCs in other namespaces.
	parentRules := staticRules{vpcs.GroupResource(): {
		func() registry.Entry {
			e := entry("provider/vm", vms, "VirtualMachine")
			e.Paths = []fieldpath.Reference{fieldpathtest.MustParseReference(fieldpath.ReferenceSpec{Path: ".spec.parents[*].name", NamespacePath: "namespace"})}
			return e
		}(),
		entry("provider/db", dbs, "Database", ".spec.vpc"),
	}}
	item := teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-a", nil))
	terminating := func(f *fencingDependents) { f.terminatingNamespaces = map[string]bool{"default": true} }
	tests := []struct {
		name        string
		req         admission.Request
		rules       staticRules
		setup       func(*fencingDependents)
		wantAllowed bool
		wantCode    int32
		wantVia     string
		wantMessage string
		// wantCalls are the live reads, wantFenced the types asked
		// whether the index is fenced.
		wantCalls  []string
		wantFenced []string
		// wantNamespaces are the namespaces asked whether they are being
		// deleted; nil: the item's, once.
		wantNamespaces []string
	}{
		{
			name:        "fenced for every type: allowed from the index, nothing read",
			req:         item,
			wantAllowed: true, wantVia: viaTeardown,
			wantCalls: []string{}, wantFenced: []string{"virtualmachines", "databases"},
		},
		{
			name: "fenced for every type: a dependent only a live read would find does not count",
			req:  item,
			setup: func(f *fencingDependents) {
				f.addLive(vms, object("default", "vm-new", vmRefs("vpc-a")))
			},
			wantAllowed: true, wantVia: viaTeardown,
			wantCalls: []string{}, wantFenced: []string{"virtualmachines", "databases"},
		},
		{
			name: "a type the index is not fenced for is read live, and what the read finds denies",
			req:  item,
			setup: func(f *fencingDependents) {
				f.unfenced = map[schema.GroupVersionResource]bool{vms: true}
				f.addLive(vms, object("default", "vm-new", vmRefs("vpc-a")))
			},
			wantCode: http.StatusForbidden, wantVia: viaLive, wantMessage: "VirtualMachine/default/vm-new",
			wantCalls: []string{"consumer virtualmachines ns=default"}, wantFenced: []string{"virtualmachines", "databases"},
		},
		{
			name: "a type the index is not fenced for is read live; only that one",
			req:  item,
			setup: func(f *fencingDependents) {
				f.unfenced = map[schema.GroupVersionResource]bool{dbs: true}
				f.addLive(vms, object("default", "vm-new", vmRefs("vpc-a")))
			},
			wantAllowed: true, wantVia: viaLive,
			wantCalls: []string{"consumer databases ns=default"}, wantFenced: []string{"virtualmachines", "databases"},
		},
		{
			name: "a fence that cannot be taken reads live",
			req:  item,
			setup: func(f *fencingDependents) {
				f.fenceErr = map[schema.GroupVersionResource]error{vms: errors.New("connection refused")}
				f.addLive(vms, object("default", "vm-new", vmRefs("vpc-a")))
			},
			wantCode: http.StatusForbidden, wantVia: viaLive, wantMessage: "VirtualMachine/default/vm-new",
			wantCalls: []string{"consumer virtualmachines ns=default"}, wantFenced: []string{"virtualmachines", "databases"},
		},
		{
			name: "a type that is not synced (its watch broke) is read live without asking for a fence",
			req:  item,
			setup: func(f *fencingDependents) {
				f.states = map[schema.GroupVersionResource]index.State{vms: {Phase: index.PhaseSyncing, Namespaced: true, Listed: true}}
				f.addLive(vms, object("default", "vm-new", vmRefs("vpc-a")))
			},
			wantCode: http.StatusForbidden, wantVia: viaLive, wantMessage: "VirtualMachine/default/vm-new",
			wantCalls: []string{"consumer virtualmachines ns=default"}, wantFenced: []string{"databases"},
		},
		{
			name: "a read that fails fails the item",
			req:  item,
			setup: func(f *fencingDependents) {
				f.unfenced = map[schema.GroupVersionResource]bool{vms: true}
				f.err = errors.New("connection refused")
			},
			wantCode: http.StatusServiceUnavailable, wantVia: viaLive, wantMessage: "retry",
			wantCalls: []string{"consumer virtualmachines ns=default"}, wantFenced: []string{"virtualmachines"},
		},
		{
			name: "in a namespace being deleted, namespaced dependents are decided from the index without a fence",
			req:  item,
			setup: func(f *fencingDependents) {
				terminating(f)
				f.unfenced = map[schema.GroupVersionResource]bool{vms: true, dbs: true}
				f.addLive(vms, object("default", "vm-new", vmRefs("vpc-a")))
			},
			wantAllowed: true, wantVia: viaTeardown,
			wantCalls: []string{}, wantFenced: []string{},
		},
		{
			name: "in a namespace being deleted, a type that is not synced is read live",
			req:  item,
			setup: func(f *fencingDependents) {
				terminating(f)
				f.states = map[schema.GroupVersionResource]index.State{vms: {Phase: index.PhaseSyncing, Namespaced: true, Listed: true}}
				f.addLive(vms, object("default", "vm-new", vmRefs("vpc-a")))
			},
			wantCode: http.StatusForbidden, wantVia: viaLive, wantMessage: "VirtualMachine/default/vm-new",
			wantCalls: []string{"consumer virtualmachines ns=default"}, wantFenced: []string{},
		},
		{
			name: "in a namespace being deleted, cluster-scoped dependents (which it does not delete) need a fence",
			req:  item,
			setup: func(f *fencingDependents) {
				terminating(f)
				f.states = map[schema.GroupVersionResource]index.State{vms: {Phase: index.PhaseSynced, Namespaced: false}}
				f.unfenced = map[schema.GroupVersionResource]bool{vms: true}
				f.addLive(vms, object("", "vm-global", vmRefs("vpc-a")))
			},
			wantCode: http.StatusForbidden, wantVia: viaLive, wantMessage: "VirtualMachine/vm-global",
			wantCalls: []string{"consumer virtualmachines ns="}, wantFenced: []string{"virtualmachines"},
		},
		{
			name:  "in a namespace being deleted, dependents that can reference the object from other namespaces need a fence",
			req:   item,
			rules: parentRules,
			setup: func(f *fencingDependents) {
				terminating(f)
				f.unfenced = map[schema.GroupVersionResource]bool{vms: true}
			},
			wantAllowed: true, wantVia: viaLive,
			wantCalls: []string{"consumer virtualmachines ns=default"}, wantFenced: []string{"virtualmachines"},
		},
		{
			name: "a namespace that is not being deleted (an APIBinding's teardown) needs fences",
			req:  item,
			setup: func(f *fencingDependents) {
				f.terminatingNamespaces = map[string]bool{"other": true}
				f.unfenced = map[schema.GroupVersionResource]bool{dbs: true}
			},
			wantAllowed: true, wantVia: viaLive,
			wantCalls: []string{"consumer databases ns=default"}, wantFenced: []string{"virtualmachines", "databases"},
		},
		{
			name: "when it cannot be told whether the namespace is being deleted, fences decide",
			req:  item,
			setup: func(f *fencingDependents) {
				terminating(f)
				f.nsErr = errors.New("connection refused")
				f.unfenced = map[schema.GroupVersionResource]bool{vms: true}
			},
			wantAllowed: true, wantVia: viaLive,
			wantCalls: []string{"consumer virtualmachines ns=default"}, wantFenced: []string{"virtualmachines", "databases"},
		},
		{
			name:        "an item of a cluster-scoped object asks for no namespace",
			req:         teardownItem(deleteRequest(vpcs, consumer, "", "vpc-a", nil)),
			setup:       terminating,
			wantAllowed: true, wantVia: viaTeardown,
			wantCalls: []string{}, wantFenced: []string{"virtualmachines", "databases"}, wantNamespaces: []string{},
		},
		{
			name:        "a DELETE that is not kcp's teardown is always read live, without asking for a fence",
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			setup:       terminating,
			wantAllowed: true, wantVia: viaLive,
			wantCalls: []string{"consumer virtualmachines ns=default", "consumer databases ns=default"}, wantFenced: []string{}, wantNamespaces: []string{},
		},
		{
			name: "a user's DeleteCollection item is read live",
			req: func() admission.Request {
				r := item
				r.UserInfo = authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:masters"}}
				return r
			}(),
			setup: func(f *fencingDependents) {
				f.addLive(dbs, object("default", "db-new", map[string]any{"vpc": "vpc-a"}))
			},
			wantCode: http.StatusForbidden, wantVia: viaLive, wantMessage: "Database/default/db-new",
			wantCalls: []string{"consumer virtualmachines ns=default", "consumer databases ns=default"}, wantFenced: []string{}, wantNamespaces: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fencingDependents{fakeDependents: &fakeDependents{}}
			if tt.setup != nil {
				tt.setup(deps)
			}
			m := newMetrics()
			r := rules
			if tt.rules != nil {
				r = tt.rules
			}
			v := NewValidator(r, loaded(true), deps, WithNamespaces(deps), WithMetrics(m))
			ctx := webhook.WithProvider(context.Background(), provider)
			resp := v.Handle(ctx, tt.req)
			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if !tt.wantAllowed && (resp.Result.Code != tt.wantCode || !strings.Contains(resp.Result.Message, tt.wantMessage)) {
				t.Errorf("result %+v, want code %d and a message containing %q", resp.Result, tt.wantCode, tt.wantMessage)
			}
			if fmt.Sprint(deps.calls) != fmt.Sprint(tt.wantCalls) {
				t.Errorf("live reads %v, want %v", deps.calls, tt.wantCalls)
			}
			if fmt.Sprint(deps.fenced) != fmt.Sprint(tt.wantFenced) {
				t.Errorf("asked for fences of %v, want %v", deps.fenced, tt.wantFenced)
			}
			wantNamespaces := tt.wantNamespaces
			if wantNamespaces == nil {
				wantNamespaces = []string{"consumer/default"}
			}
			if fmt.Sprint(deps.nsAsked) != fmt.Sprint(wantNamespaces) {
				t.Errorf("asked whether %v are being deleted, want %v", deps.nsAsked, wantNamespaces)
			}
			if len(deps.queries) != len(deps.calls) {
				t.Errorf("%d queries for %d reads", len(deps.queries), len(deps.calls))
			}
			// The metrics count how it was decided.
			outcome := webhook.DecisionAllowed
			if !tt.wantAllowed {
				outcome = webhook.DecisionDenied
				if tt.wantCode == http.StatusServiceUnavailable {
					outcome = webhook.DecisionError
				}
			}
			if got, n := webhooktest.MetricValue(t, m, "dependency_webhook_decisions_total", "outcome", outcome, "via", tt.wantVia); got != 1 || n != 1 {
				t.Errorf("decisions{outcome=%q,via=%q} = %v of %d series, want the only one, 1", outcome, tt.wantVia, got, n)
			}
		})
	}
}

// The fences of a teardown's items are taken from its first item on: kcp
// sends the items again and again, backing off up to a minute, and each
// must be able to use the fence the first one took, so every item of one
// teardown (a resource in a namespace of a workspace) says the same moment
// it had begun by, and another teardown a later one.
func TestTeardownFencesFromItsFirstItem(t *testing.T) {
	rules := staticRules{vpcs.GroupResource(): {entry("provider/vm", vms, "VirtualMachine", ".spec.vpcRef.name")}}
	deps := &fencingDependents{fakeDependents: &fakeDependents{}}
	v := NewValidator(rules, loaded(true), deps, WithNamespaces(deps), WithMetrics(newMetrics()))
	ctx := webhook.WithProvider(context.Background(), provider)
	items := []admission.Request{
		teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-a", nil)),
		teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-b", nil)),
		teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-a", nil)),
		teardownItem(deleteRequest(vpcs, consumer, "other", "vpc-c", nil)),
	}
	for i, req := range items {
		if resp := v.Handle(ctx, req); !resp.Allowed {
			t.Fatalf("item %d denied: %+v", i, resp.Result)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if len(deps.begun) != len(items) {
		t.Fatalf("Fenced was called %d times, want once per item (%d)", len(deps.begun), len(items))
	}
	for i := 1; i < 3; i++ {
		if !deps.begun[i].Equal(deps.begun[0]) {
			t.Errorf("item %d of the teardown of default says it began by %v, the first %v", i, deps.begun[i], deps.begun[0])
		}
	}
	if !deps.begun[3].After(deps.begun[0]) {
		t.Errorf("the first item of the teardown of other says it began by %v, not after the first item of default's (%v)", deps.begun[3], deps.begun[0])
	}
}

// The confirming read carries the scheme under which the dependents are
// labelled, so that it selects them by label, and the protected resource
// the labels name; without a scheme that applies, none.
func TestConfirmReceivesTheLabellingScheme(t *testing.T) {
	vmEntry := entry("provider/vm", vms, "VirtualMachine", ".spec.vpcRef.name")
	scheme := reflabels.NewScheme(nil, []reflabels.Reference{{Path: fieldpathtest.MustParse(".spec.vpcRef.name"), Target: vpcs.GroupResource()}})
	vmsOf := func(cluster string) registry.Target {
		return registry.Target{Cluster: logicalcluster.Name(cluster), Resource: vms.GroupResource()}
	}
	otherVersion := vmEntry.Dependent
	otherVersion.Resource.Version = "v2"
	tests := []struct {
		name       string
		req        admission.Request
		labellings map[registry.Target]registry.Labelling
		setup      func(*fakeDependents)
		wantScheme string
	}{
		{
			name:       "labelled dependents",
			req:        deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			labellings: map[registry.Target]registry.Labelling{vmsOf("provider"): {Dependent: vmEntry.Dependent, Scheme: scheme, Labellable: true, Labelled: true}},
			wantScheme: scheme.Fingerprint,
		},
		{
			name:       "labelled dependents, in an item of kcp's teardown the index is not fenced for",
			req:        teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-a", nil)),
			labellings: map[registry.Target]registry.Labelling{vmsOf("provider"): {Dependent: vmEntry.Dependent, Scheme: scheme, Labellable: true, Labelled: true}},
			setup:      func(f *fakeDependents) { f.unfenced = map[schema.GroupVersionResource]bool{vms: true} },
			wantScheme: scheme.Fingerprint,
		},
		{
			name:       "dependents that cannot be labelled",
			req:        deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			labellings: map[registry.Target]registry.Labelling{vmsOf("provider"): {Dependent: vmEntry.Dependent, Scheme: scheme, Reason: "status"}},
		},
		{
			name:       "dependents not labelled yet (a rule does not report DependentsLabelled)",
			req:        deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			labellings: map[registry.Target]registry.Labelling{vmsOf("provider"): {Dependent: vmEntry.Dependent, Scheme: scheme, Labellable: true}},
		},
		{
			name:       "a scheme of the type in another version does not apply",
			req:        deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			labellings: map[registry.Target]registry.Labelling{vmsOf("provider"): {Dependent: otherVersion, Scheme: scheme, Labellable: true, Labelled: true}},
		},
		{
			name:       "a scheme of another workspace does not apply",
			req:        deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			labellings: map[registry.Target]registry.Labelling{{Cluster: "other", Resource: vms.GroupResource()}: {Dependent: vmEntry.Dependent, Scheme: scheme, Labellable: true, Labelled: true}},
		},
		{
			name: "no scheme",
			req:  deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			if tt.setup != nil {
				tt.setup(deps)
			}
			rules := labelledRules{staticRules: staticRules{vpcs.GroupResource(): {vmEntry}}, labellings: tt.labellings}
			v := NewValidator(rules, loaded(true), deps, WithNamespaces(deps))
			if resp := v.Handle(webhook.WithProvider(context.Background(), provider), tt.req); !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			if len(deps.queries) != 1 {
				t.Fatalf("queries %+v, want one", deps.queries)
			}
			q := deps.queries[0]
			if q.Scheme != tt.wantScheme {
				t.Errorf("scheme %q, want %q", q.Scheme, tt.wantScheme)
			}
			if q.Target != vpcs.GroupResource() || q.Name != "vpc-a" || q.Namespace != "default" || q.Cluster != consumer || q.Source != vmEntry.Dependent {
				t.Errorf("query %+v, want one of the VirtualMachines for vpcs.network.io default/vpc-a in %s", q, consumer)
			}
		})
	}
}

// cycleRules: VirtualMachines reference VPCs at .spec.vpcRef.name (a rule
// of the compute provider), VPCs reference their gateway VirtualMachine at
// .spec.gatewayVM (a rule of the network provider), Routers,
// cluster-scoped, reference VirtualMachines at .spec.vm and VPCs at
// .spec.vpc, VirtualMachines and Databases reference each other at .spec.db
// and .spec.vm, VirtualMachines reference peer VirtualMachines in any
// namespace at .spec.peer.name (namespace at .spec.peer.namespace), and
// Routers at .spec.router.
var cycleRules = staticRules{
	vpcs.GroupResource(): {
		entry("provider/vm", vms, "VirtualMachine", ".spec.vpcRef.name"),
		entry("provider/router-vpc", routers, "Router", ".spec.vpc"),
	},
	vms.GroupResource(): {
		entry("provider/vpc-gateway", vpcs, "VPC", ".spec.gatewayVM"),
		entry("provider/router", routers, "Router", ".spec.vm"),
		entry("provider/db-vm", dbs, "Database", ".spec.vm"),
		func() registry.Entry {
			e := entry("provider/vm-peer", vms, "VirtualMachine")
			e.Paths = []fieldpath.Reference{fieldpathtest.MustParseReference(fieldpath.ReferenceSpec{Path: ".spec.peer.name", NamespacePath: "namespace"})}
			return e
		}(),
	},
	dbs.GroupResource():     {entry("provider/vm-db", vms, "VirtualMachine", ".spec.db")},
	routers.GroupResource(): {entry("provider/vm-router", vms, "VirtualMachine", ".spec.router")},
}

// being marks namespaces as being deleted.
func being(namespaces ...string) func(*fakeDependents) {
	return func(f *fakeDependents) {
		if f.terminatingNamespaces == nil {
			f.terminatingNamespaces = map[string]bool{}
		}
		for _, ns := range namespaces {
			f.terminatingNamespaces[ns] = true
		}
	}
}

// and combines setups.
func and(setups ...func(*fakeDependents)) func(*fakeDependents) {
	return func(f *fakeDependents) {
		for _, s := range setups {
			s(f)
		}
	}
}

func peer(namespace, name string) map[string]any {
	return map[string]any{"peer": map[string]any{"namespace": namespace, "name": name}}
}

// recordedEvents records the Events a validator creates.
type recordedEvents struct {
	events     []corev1.Event
	namespaces []string
}

func (r *recordedEvents) CreateEvent(_ context.Context, _ index.Source, _ logicalcluster.Name, namespace string, body []byte) error {
	var e corev1.Event
	if err := json.Unmarshal(body, &e); err != nil {
		return err
	}
	r.events = append(r.events, e)
	r.namespaces = append(r.namespaces, namespace)
	return nil
}

// Event is for the DeletionBlocked Events of refused DELETEs, which the
// teardown items these tests send never record.
func (r *recordedEvents) Event(context.Context, index.Source, string, kcp.Meta, string, string, string) error {
	return errors.New("not an item of a teardown")
}

// A cycle of references is broken in kcp's teardown only where a teardown
// under way deletes every object that references an object of it; then
// each of its objects goes. Elsewhere every object waits for its
// dependents, and what it waits for outside the teardown is named.
func TestTeardownBreaksCycles(t *testing.T) {
	gateway := func(vm string) map[string]any { return map[string]any{"gatewayVM": vm} }
	cycle := func(f *fakeDependents) {
		f.add(consumer, vms, object("ns", "vm-1", vmRefs("vpc-a")))
		f.add(consumer, vpcs, object("ns", "vpc-a", gateway("vm-1")))
	}
	longCycle := func(f *fakeDependents) {
		// vpc-a ← vm-b ← vpc-b ← vm-a ← vpc-a.
		f.add(consumer, vms, object("ns", "vm-a", vmRefs("vpc-a")), object("ns", "vm-b", vmRefs("vpc-b")))
		f.add(consumer, vpcs, object("ns", "vpc-a", gateway("vm-b")), object("ns", "vpc-b", gateway("vm-a")))
	}
	edgeRouter := func(spec map[string]any) func(*fakeDependents) {
		return func(f *fakeDependents) {
			f.states = map[schema.GroupVersionResource]index.State{routers: {Phase: index.PhaseSynced, Namespaced: false}}
			f.add(consumer, routers, object("", "edge", spec))
		}
	}
	peers := func(f *fakeDependents) {
		f.add(consumer, vms, object("ns", "vm-a", peer("other", "vm-b")), object("other", "vm-b", peer("ns", "vm-a")))
	}
	vmItem := teardownItem(deleteRequest(vms, consumer, "ns", "vm-1", nil))
	vpcItem := teardownItem(deleteRequest(vpcs, consumer, "ns", "vpc-a", nil))
	tests := []struct {
		name        string
		req         admission.Request
		setup       func(*fakeDependents)
		wantAllowed bool
		// wantMessage are parts of the denial, wantNot what it must not say.
		wantMessage []string
		wantNot     []string
		// wantCycle is the audit annotation of an allowed item.
		wantCycle string
		// wantEvent is set when the denial records that the teardown waits
		// for something outside it.
		wantEvent bool
	}{
		{
			name:        "in a namespace being deleted, an object of a two-object cycle goes",
			req:         vmItem,
			setup:       and(cycle, being("ns")),
			wantAllowed: true, wantCycle: "VirtualMachine/ns/vm-1, VPC/ns/vpc-a",
		},
		{
			name:        "in a namespace being deleted, the other object of the cycle goes too",
			req:         vpcItem,
			setup:       and(cycle, being("ns")),
			wantAllowed: true, wantCycle: "VirtualMachine/ns/vm-1, VPC/ns/vpc-a",
		},
		{
			name:  "an APIBinding's teardown (the namespace is not being deleted) never breaks a cycle through another binding's type",
			req:   vmItem,
			setup: cycle,
			wantMessage: []string{"still referenced by VPC/ns/vpc-a", "which only the deletion of the namespaces or the workspace of its objects breaks",
				`VPC/ns/vpc-a (namespace "ns" is not being deleted)`},
			wantEvent: true,
		},
		{
			name: "an APIBinding's teardown never breaks a cycle through its own types either: it cannot be told apart",
			req:  teardownItem(deleteRequest(dbs, consumer, "ns", "db-1", nil)),
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("ns", "vm-1", map[string]any{"db": "db-1"}))
				f.add(consumer, dbs, object("ns", "db-1", map[string]any{"vm": "vm-1"}))
			},
			wantMessage: []string{"still referenced by VirtualMachine/ns/vm-1", "only the deletion of the namespaces or the workspace"},
			wantEvent:   true,
		},
		{
			name:        "every object of a longer cycle goes, not only the first",
			req:         teardownItem(deleteRequest(vpcs, consumer, "ns", "vpc-b", nil)),
			setup:       and(longCycle, being("ns")),
			wantAllowed: true, wantCycle: "VirtualMachine/ns/vm-a, VirtualMachine/ns/vm-b, VPC/ns/vpc-a, VPC/ns/vpc-b",
		},
		{
			name: "an object of a cycle that an object off the cycle references waits for it (dependency order), which the teardown deletes",
			req:  vmItem,
			setup: and(cycle, being("ns"), func(f *fakeDependents) {
				// vpc-b's gateway is vm-1, but vm-1 does not reference
				// vpc-b: vpc-b goes first.
				f.add(consumer, vpcs, object("ns", "vpc-b", gateway("vm-1")))
			}),
			wantMessage: []string{"still referenced by VPC/ns/vpc-a, VPC/ns/vpc-b"},
			wantNot:     []string{"outside", "cycle"},
		},
		{
			name:        "the other object of that cycle goes: all that references it goes with the namespace",
			req:         vpcItem,
			setup:       and(cycle, being("ns"), func(f *fakeDependents) { f.add(consumer, vpcs, object("ns", "vpc-b", gateway("vm-1"))) }),
			wantAllowed: true, wantCycle: "VirtualMachine/ns/vm-1, VPC/ns/vpc-a",
		},
		{
			name:  "an object of a cycle that a cluster-scoped object references waits for it while the workspace stays, naming it",
			req:   vmItem,
			setup: and(cycle, being("ns"), edgeRouter(map[string]any{"vm": "vm-1"})),
			wantMessage: []string{"still referenced by Router/edge, VPC/ns/vpc-a;",
				`the deletion of namespace "ns" waits for Router/edge (a cluster-scoped object is deleted with its workspace, which is not being deleted), outside it`},
			wantEvent: true,
		},
		{
			name:  "the other object of that cycle waits, naming the object outside",
			req:   vpcItem,
			setup: and(cycle, being("ns"), edgeRouter(map[string]any{"vm": "vm-1"})),
			wantMessage: []string{"still referenced by VirtualMachine/ns/vm-1;", `which the deletion of namespace "ns" can break only if it deletes every object`,
				"outside it: Router/edge, which references VirtualMachine/ns/vm-1 (a cluster-scoped object is deleted with its workspace"},
			wantEvent: true,
		},
		{
			name:        "a referrer of another object of the cycle outside the teardown holds the cycle too",
			req:         vmItem,
			setup:       and(cycle, being("ns"), edgeRouter(map[string]any{"vpc": "vpc-a"})),
			wantMessage: []string{"still referenced by VPC/ns/vpc-a;", "outside it: Router/edge, which references VPC/ns/vpc-a (a cluster-scoped"},
			wantEvent:   true,
		},
		{
			name:        "in the workspace's deletion (its namespace default is being deleted) the same cycle goes, the cluster-scoped object going too",
			req:         vmItem,
			setup:       and(cycle, being("ns", "default"), edgeRouter(map[string]any{"vpc": "vpc-a"})),
			wantAllowed: true, wantCycle: "VirtualMachine/ns/vm-1, VPC/ns/vpc-a",
		},
		{
			name: "in the workspace's deletion a cycle through a cluster-scoped object goes",
			req:  teardownItem(deleteRequest(routers, consumer, "", "edge", nil)),
			setup: and(being("default"), edgeRouter(map[string]any{"vm": "vm-1"}), func(f *fakeDependents) {
				f.add(consumer, vms, object("ns", "vm-1", map[string]any{"router": "edge"}))
			}),
			wantAllowed: true, wantCycle: "Router/edge, VirtualMachine/ns/vm-1",
		},
		{
			name:  "a cycle across two namespaces waits while one of them stays, naming the object there",
			req:   teardownItem(deleteRequest(vms, consumer, "ns", "vm-a", nil)),
			setup: and(peers, being("ns")),
			wantMessage: []string{"still referenced by VirtualMachine/other/vm-b",
				`outside it: VirtualMachine/other/vm-b (namespace "other" is not being deleted)`},
			wantEvent: true,
		},
		{
			name:        "a cycle across two namespaces deleted together goes",
			req:         teardownItem(deleteRequest(vms, consumer, "ns", "vm-a", nil)),
			setup:       and(peers, being("ns", "other")),
			wantAllowed: true, wantCycle: "VirtualMachine/ns/vm-a, VirtualMachine/other/vm-b",
		},
		{
			name: "a cycle across two namespaces deleted together waits until the index has caught up with the teardown for a type that references across namespaces",
			req:  teardownItem(deleteRequest(vms, consumer, "ns", "vm-a", nil)),
			setup: and(peers, being("ns", "other"), func(f *fakeDependents) {
				f.unfenced = map[schema.GroupVersionResource]bool{vms: true}
			}),
			wantMessage: []string{"deletes once the index has caught up with the teardown for every VirtualMachine that may reference"},
			wantNot:     []string{"outside"},
		},
		{
			name: "a cycle waits while the index of a type that may reference it is not synced",
			req:  vmItem,
			setup: and(cycle, being("ns"), func(f *fakeDependents) {
				f.states = map[schema.GroupVersionResource]index.State{dbs: {Phase: index.PhaseSyncing, Namespaced: true, Listed: true}}
			}),
			wantMessage: []string{"deletes once the index of Database is not synced"},
		},
		{
			name: "a cycle of objects being deleted is no cycle",
			req:  vpcItem,
			setup: and(being("ns"), func(f *fakeDependents) {
				f.add(consumer, vms, terminating(object("ns", "vm-1", vmRefs("vpc-a"))))
				f.add(consumer, vpcs, object("ns", "vpc-a", gateway("vm-1")))
			}),
			wantAllowed: true,
		},
		{
			name:        "a DELETE that is not kcp's teardown never breaks a cycle",
			req:         deleteRequest(vms, consumer, "ns", "vm-1", nil),
			setup:       and(cycle, being("ns")),
			wantMessage: []string{"still referenced by VPC/ns/vpc-a"},
			wantNot:     []string{"cycle"},
		},
		{
			name: "a user's DeleteCollection item never breaks a cycle",
			req: func() admission.Request {
				r := vmItem
				r.UserInfo = authenticationv1.UserInfo{Username: "alice"}
				return r
			}(),
			setup:       and(cycle, being("ns")),
			wantMessage: []string{"still referenced by VPC/ns/vpc-a"},
		},
		{
			name:        "a chain that is no cycle is not broken, and waits for what the teardown deletes without saying more",
			req:         vmItem,
			setup:       and(being("ns"), func(f *fakeDependents) { f.add(consumer, vpcs, object("ns", "vpc-a", gateway("vm-1"))) }),
			wantMessage: []string{"still referenced by VPC/ns/vpc-a; delete these or remove their references first"},
			wantNot:     []string{"outside", "cycle"},
		},
		{
			name:        "a chain whose dependent is outside the teardown names it",
			req:         vpcItem,
			setup:       and(being("ns"), edgeRouter(map[string]any{"vpc": "vpc-a"})),
			wantMessage: []string{"still referenced by Router/edge", `the deletion of namespace "ns" waits for Router/edge (a cluster-scoped object is deleted with its workspace, which is not being deleted), outside it`},
			wantEvent:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			tt.setup(deps)
			m := newMetrics()
			events := &recordedEvents{}
			v := NewValidator(cycleRules, loaded(true), deps, WithNamespaces(deps), WithMetrics(m), WithEvents(events))
			resp, d := v.handle(webhook.WithProvider(context.Background(), provider), tt.req)
			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v, audit %v)", resp.Allowed, tt.wantAllowed, resp.Result, resp.AuditAnnotations)
			}
			if !tt.wantAllowed {
				if resp.Result.Code != http.StatusForbidden {
					t.Errorf("code = %d, want 403", resp.Result.Code)
				}
				for _, want := range tt.wantMessage {
					if !strings.Contains(resp.Result.Message, want) {
						t.Errorf("message %q does not contain %q", resp.Result.Message, want)
					}
				}
				for _, not := range tt.wantNot {
					if strings.Contains(resp.Result.Message, not) {
						t.Errorf("message %q contains %q", resp.Result.Message, not)
					}
				}
			}
			if got := resp.AuditAnnotations[AuditCycle]; got != tt.wantCycle {
				t.Errorf("audit %s = %q, want %q", AuditCycle, got, tt.wantCycle)
			}
			broken := 0.0
			if tt.wantCycle != "" {
				broken = 1
				if d.outcome != webhook.DecisionAllowed || d.via != viaTeardown {
					t.Errorf("decision %+v, want allowed via teardown", d)
				}
				if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "cycle ("+tt.wantCycle+")") || !strings.Contains(resp.Warnings[0], "still reference it") {
					t.Errorf("warnings %v, want one naming the cycle", resp.Warnings)
				}
			} else if len(resp.Warnings) != 0 {
				t.Errorf("warnings %v, want none", resp.Warnings)
			}
			if got, _ := webhooktest.MetricValue(t, m, "dependency_webhook_teardown_cycles_broken_total"); got != broken {
				t.Errorf("dependency_webhook_teardown_cycles_broken_total = %v, want %v", got, broken)
			}
			if len(deps.calls) != 0 && tt.wantCycle != "" {
				t.Errorf("breaking a cycle read live: %v", deps.calls)
			}
			if got := len(events.events) > 0; got != tt.wantEvent {
				t.Errorf("recorded Events %+v, want some: %v", events.events, tt.wantEvent)
			}
			for _, e := range events.events {
				if e.Message != resp.Result.Message || e.Reason != EventReasonTeardownWaits || e.Type != corev1.EventTypeWarning {
					t.Errorf("Event %s %s %q, want a Warning %s with the denial", e.Type, e.Reason, e.Message, EventReasonTeardownWaits)
				}
			}
		})
	}
}

// Where kcp's teardown waits for something outside it, an Event says so
// once, not at every retry: on the namespace being deleted, in default
// (kcp creates nothing in a namespace being deleted), or on the object.
func TestTeardownWaitsAreRecordedOnce(t *testing.T) {
	tests := []struct {
		name          string
		terminating   []string
		wantNamespace string
		wantInvolved  corev1.ObjectReference
	}{
		{
			name: "a namespace's teardown: on the namespace", terminating: []string{"ns"},
			wantNamespace: "default", wantInvolved: corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: "ns"},
		},
		{
			name:          "an APIBinding's teardown: on the object",
			wantNamespace: "ns", wantInvolved: corev1.ObjectReference{APIVersion: "network.io/v1", Kind: "VPC", Namespace: "ns", Name: "vpc-a", UID: "uid-ns-vpc-a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{states: map[schema.GroupVersionResource]index.State{routers: {Phase: index.PhaseSynced, Namespaced: false}}}
			being(tt.terminating...)(deps)
			deps.add(consumer, routers, object("", "edge", map[string]any{"vpc": "vpc-a"}))
			events := &recordedEvents{}
			v := NewValidator(cycleRules, loaded(true), deps, WithNamespaces(deps), WithEvents(events))
			ctx := webhook.WithProvider(context.Background(), provider)
			for range 3 {
				if resp := v.Handle(ctx, teardownItem(deleteRequest(vpcs, consumer, "ns", "vpc-a", nil))); resp.Allowed {
					t.Fatal("vpc-a, which Router/edge references, was allowed")
				}
			}
			if len(events.events) != 1 {
				t.Fatalf("%d Events, want 1", len(events.events))
			}
			if events.namespaces[0] != tt.wantNamespace || events.events[0].InvolvedObject != tt.wantInvolved {
				t.Errorf("Event in %q about %+v, want in %q about %+v", events.namespaces[0], events.events[0].InvolvedObject, tt.wantNamespace, tt.wantInvolved)
			}
		})
	}
}

// ringRules: VirtualMachines reference Databases at .spec.db and
// Databases VirtualMachines at .spec.vm, within their namespace; with
// cross, VirtualMachines also reference peers in any namespace.
func ringRules(cross bool) staticRules {
	r := staticRules{
		vms.GroupResource(): {entry("provider/db-vm", dbs, "Database", ".spec.vm")},
		dbs.GroupResource(): {entry("provider/vm-db", vms, "VirtualMachine", ".spec.db")},
	}
	if cross {
		r[vms.GroupResource()] = append(r[vms.GroupResource()], cycleRules[vms.GroupResource()][3])
	}
	return r
}

// ring adds to f a ring of n VirtualMachines and n Databases in namespace
// ns: vm-i references db-vm-j, which references vm-j, where j is i+1 if
// forward and i-1 otherwise. It returns the names of the VirtualMachines.
func ring(f *fakeDependents, ns string, n int, forward bool) []string {
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("vm-%04d", i)
	}
	for i := range n {
		next := (i + 1) % n
		if !forward {
			next = (i + n - 1) % n
		}
		f.add(consumer, vms, object(ns, names[i], map[string]any{"db": "db-" + names[next]}))
		f.add(consumer, dbs, object(ns, "db-"+names[next], map[string]any{"vm": names[next]}))
	}
	return names
}

// kcp's teardown sends the items of a namespace type by type, in name
// order, and stops a pass at the first denial; a ring must go in one pass
// whichever way its references run, whether the index has seen the
// deletions of the pass or not, and whether its types may be referenced
// from other namespaces or not, and be proved once.
func TestTeardownDeletesARingInOnePass(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		forward bool
		// lagging: the index sees no deletion during the pass.
		lagging bool
		// cross: VirtualMachines may be referenced from other namespaces.
		cross bool
	}{
		{name: "66 referencing the next, the index current", n: 66, forward: true},
		{name: "66 referencing the previous, the index current", n: 66},
		{name: "66 referencing the previous, the index lagging", n: 66, lagging: true},
		{name: "66 that may be referenced from other namespaces, the index current", n: 66, cross: true},
		{name: "66 that may be referenced from other namespaces, the index lagging", n: 66, cross: true, lagging: true},
		{name: "200 referencing the previous, the index current", n: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			being("ns")(deps)
			names := ring(deps, "ns", tt.n, tt.forward)
			m := newMetrics()
			v := NewValidator(ringRules(tt.cross), loaded(true), deps, WithNamespaces(deps), WithMetrics(m))
			ctx := webhook.WithProvider(context.Background(), provider)
			gone := func(gvr schema.GroupVersionResource, name string) {
				if tt.lagging {
					return
				}
				key := consumer.String() + "|" + gvr.String()
				deps.indexed[key] = slices.DeleteFunc(deps.indexed[key], func(o map[string]any) bool { return o["metadata"].(map[string]any)["name"] == name })
			}
			// Databases first, then VirtualMachines, each in name order.
			dbNames := make([]string, len(names))
			for i, n := range names {
				dbNames[i] = "db-" + n
			}
			slices.Sort(dbNames)
			for _, pass := range []struct {
				gvr   schema.GroupVersionResource
				names []string
			}{{dbs, dbNames}, {vms, names}} {
				for _, name := range pass.names {
					resp := v.Handle(ctx, teardownItem(deleteRequest(pass.gvr, consumer, "ns", name, nil)))
					if !resp.Allowed {
						t.Fatalf("%s %s was denied: %s", pass.gvr.Resource, name, resp.Result.Message)
					}
					gone(pass.gvr, name)
				}
			}
			if got, _ := webhooktest.MetricValue(t, m, "dependency_webhook_teardown_cycles_broken_total"); got != 1 {
				t.Errorf("dependency_webhook_teardown_cycles_broken_total = %v, want 1: the ring is proved once", got)
			}
		})
	}
}

// A cycle remembered as broken lets an object go only while nothing but
// its objects references it, nothing outside the teardown references an
// object of it, and the rules are the same.
func TestTeardownRemembersABrokenCycleWhileItHolds(t *testing.T) {
	tests := []struct {
		name string
		// cross: VirtualMachines may be referenced from other namespaces.
		cross bool
		// change changes what holds after vm-0000 went.
		change      func(*fakeDependents, *staticRules)
		wantAllowed bool
		wantMessage string
	}{
		{name: "nothing changed", wantAllowed: true},
		{
			name:  "an object outside the namespace's teardown comes to reference the item",
			cross: true,
			change: func(f *fakeDependents, _ *staticRules) {
				f.add(consumer, vms, object("other", "vm-x", peer("ns", "vm-0001")))
			},
			wantMessage: `VirtualMachine/other/vm-x (namespace "other" is not being deleted)`,
		},
		{
			name:  "an object outside the namespace's teardown comes to reference another object of the cycle",
			cross: true,
			change: func(f *fakeDependents, _ *staticRules) {
				f.add(consumer, vms, object("other", "vm-x", peer("ns", "vm-0003")))
			},
			wantMessage: `VirtualMachine/other/vm-x, which references VirtualMachine/ns/vm-0003 (namespace "other" is not being deleted)`,
		},
		{
			name: "a new rule makes Routers, which are cluster-scoped, reference VirtualMachines, and one references an object of the cycle",
			change: func(f *fakeDependents, r *staticRules) {
				(*r)[vms.GroupResource()] = append((*r)[vms.GroupResource()], entry("provider/router", routers, "Router", ".spec.vm"))
				f.states = map[schema.GroupVersionResource]index.State{routers: {Phase: index.PhaseSynced, Namespaced: false}}
				f.add(consumer, routers, object("", "edge", map[string]any{"vm": "vm-0003"}))
			},
			wantMessage: "outside it: Router/edge, which references VirtualMachine/ns/vm-0003",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			being("ns")(deps)
			ring(deps, "ns", 4, false)
			rules := ringRules(tt.cross)
			m := newMetrics()
			v := NewValidator(rules, loaded(true), deps, WithNamespaces(deps), WithMetrics(m))
			ctx := webhook.WithProvider(context.Background(), provider)
			if resp := v.Handle(ctx, teardownItem(deleteRequest(vms, consumer, "ns", "vm-0000", nil))); !resp.Allowed {
				t.Fatalf("vm-0000 was denied: %s", resp.Result.Message)
			}
			if tt.change != nil {
				tt.change(deps, &rules)
			}
			resp := v.Handle(ctx, teardownItem(deleteRequest(vms, consumer, "ns", "vm-0001", nil)))
			if resp.Allowed != tt.wantAllowed || !tt.wantAllowed && !strings.Contains(resp.Result.Message, tt.wantMessage) {
				t.Errorf("allowed = %v, want %v; message %q, want it to contain %q", resp.Allowed, tt.wantAllowed, resp.Result.Message, tt.wantMessage)
			}
			if got, _ := webhooktest.MetricValue(t, m, "dependency_webhook_teardown_cycles_broken_total"); got != 1 {
				t.Errorf("dependency_webhook_teardown_cycles_broken_total = %v, want 1", got)
			}
		})
	}
}

// A reference to the item in flight holds a cycle: it may come from
// outside the teardown.
func TestTeardownCycleWaitsForAReferenceInFlight(t *testing.T) {
	now := time.Now()
	id := inflight.NewIDs(nil).New("router", now)
	for _, tt := range []struct {
		name        string
		landed      bool
		wantAllowed bool
	}{
		{name: "in flight: denied", wantAllowed: false},
		{name: "landed: allowed", landed: true, wantAllowed: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			and(being("ns"), func(f *fakeDependents) {
				f.add(consumer, vms, object("ns", "vm-1", vmRefs("vpc-a")))
				f.add(consumer, vpcs, object("ns", "vpc-a", map[string]any{"gatewayVM": "vm-1"}))
			})(deps)
			currency := &fakeCurrency{admitted: map[string]time.Time{}}
			if tt.landed {
				currency.admitted[id] = now
			}
			v := NewValidator(cycleRules, loaded(true), deps, WithNamespaces(deps), WithHorizon(currency, &fakeActivation{}, nil))
			req := teardownItem(deleteRequest(vms, consumer, "ns", "vm-1", map[string]string{
				depv1alpha1.AnnotationAdmittedReferences: inflight.Ledger{Marks: []inflight.Mark{{ID: id, At: now}}}.String(),
			}))
			resp := v.Handle(webhook.WithProvider(context.Background(), provider), req)
			if resp.Allowed != tt.wantAllowed {
				t.Errorf("allowed = %v, want %v: %+v", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if !tt.wantAllowed && !strings.Contains(resp.Result.Message, "a reference to it is in flight") {
				t.Errorf("message %q does not say a reference is in flight", resp.Result.Message)
			}
		})
	}
}

// Where kcp cannot be asked whether namespaces are being deleted, a
// teardown's denial claims nothing about what is outside it, records no
// Event, and breaks no cycle.
func TestTeardownWithoutTheNamespaceProbe(t *testing.T) {
	deps := &fakeDependents{states: map[schema.GroupVersionResource]index.State{routers: {Phase: index.PhaseSynced, Namespaced: false}}}
	deps.add(consumer, routers, object("", "edge", map[string]any{"vpc": "vpc-a"}))
	deps.add(consumer, vms, object("ns", "vm-1", vmRefs("vpc-b")))
	deps.add(consumer, vpcs, object("ns", "vpc-b", map[string]any{"gatewayVM": "vm-1"}))
	events := &recordedEvents{}
	v := NewValidator(cycleRules, loaded(true), deps, WithEvents(events))
	ctx := webhook.WithProvider(context.Background(), provider)
	resp := v.Handle(ctx, teardownItem(deleteRequest(vpcs, consumer, "ns", "vpc-a", nil)))
	if resp.Allowed || !strings.HasSuffix(resp.Result.Message, "still referenced by Router/edge; delete these or remove their references first") {
		t.Errorf("allowed = %v, message %q: want a plain denial", resp.Allowed, resp.Result.Message)
	}
	resp = v.Handle(ctx, teardownItem(deleteRequest(vms, consumer, "ns", "vm-1", nil)))
	if resp.Allowed || !strings.Contains(resp.Result.Message, "the webhook does not ask whether namespaces are being deleted") {
		t.Errorf("allowed = %v, message %q: want the cycle kept, saying why", resp.Allowed, resp.Result.Message)
	}
	if len(events.events) != 0 {
		t.Errorf("%d Events, want none", len(events.events))
	}
}

// An item of kcp's teardown tells the clearer that every object of its
// resource in its namespace is being deleted; a user's DELETE, or an item
// of an unprotected resource, tells nothing.
func TestTeardownItemsTellTheClearer(t *testing.T) {
	deps := &fakeDependents{states: map[schema.GroupVersionResource]index.State{routers: {Phase: index.PhaseSynced, Namespaced: false}}}
	v := NewValidator(cycleRules, loaded(true), deps)
	ctx := webhook.WithProvider(context.Background(), provider)
	v.Handle(ctx, deleteRequest(vpcs, consumer, "kept", "vpc-a", nil))
	v.Handle(ctx, teardownItem(deleteRequest(vpcs, consumer, "torn", "vpc-b", nil)))
	tests := []struct {
		namespace string
		resource  schema.GroupResource
		want      bool
	}{
		{"torn", vpcs.GroupResource(), true},
		{"kept", vpcs.GroupResource(), false},
		{"torn", vms.GroupResource(), false},
	}
	for _, tt := range tests {
		if got := v.TearingDown(consumer, tt.namespace, tt.resource); got != tt.want {
			t.Errorf("TearingDown(%s, %s) = %v, want %v", tt.namespace, tt.resource, got, tt.want)
		}
	}
	if v.TearingDown("other", "torn", vpcs.GroupResource()) {
		t.Error("a teardown in one workspace tells of another")
	}
}
