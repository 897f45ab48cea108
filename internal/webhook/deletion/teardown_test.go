package deletion

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
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
	nsErr    error
	nsAsked  []string
}

func (f *fencingDependents) NamespaceTerminating(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string) (bool, error) {
	f.nsAsked = append(f.nsAsked, cluster.String()+"/"+namespace)
	if f.nsErr != nil {
		return false, f.nsErr
	}
	return f.fakeDependents.NamespaceTerminating(ctx, src, cluster, namespace)
}

func (f *fencingDependents) Fenced(ctx context.Context, q index.Query) (bool, error) {
	f.fenced = append(f.fenced, q.Source.Resource.Resource)
	if err := f.fenceErr[q.Source.Resource]; err != nil {
		return false, err
	}
	return f.fakeDependents.Fenced(ctx, q)
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

// cycleRules: VirtualMachines reference VPCs at .spec.vpcRef.name, VPCs
// reference their gateway VirtualMachine at .spec.gatewayVM, Routers,
// cluster-scoped, reference VirtualMachines at .spec.vm and VPCs at
// .spec.vpc, and VirtualMachines and Databases reference each other at
// .spec.db and .spec.vm.
var cycleRules = staticRules{
	vpcs.GroupResource(): {
		entry("provider/vm", vms, "VirtualMachine", ".spec.vpcRef.name"),
		entry("provider/router-vpc", routers, "Router", ".spec.vpc"),
	},
	vms.GroupResource(): {
		entry("provider/vpc-gateway", vpcs, "VPC", ".spec.gatewayVM"),
		entry("provider/router", routers, "Router", ".spec.vm"),
		entry("provider/db-vm", dbs, "Database", ".spec.vm"),
	},
	dbs.GroupResource(): {entry("provider/vm-db", vms, "VirtualMachine", ".spec.db")},
}

// A cycle of references within kcp's teardown is broken at the object that
// sorts first (by namespace, group, resource and name); every other object
// waits for its dependents as before.
func TestTeardownBreaksCycles(t *testing.T) {
	gateway := func(vm string) map[string]any { return map[string]any{"gatewayVM": vm} }
	cycle := func(f *fakeDependents) {
		f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a")))
		f.add(consumer, vpcs, object("default", "vpc-a", gateway("vm-1")))
	}
	vmItem := teardownItem(deleteRequest(vms, consumer, "default", "vm-1", nil))
	vpcItem := teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-a", nil))
	tests := []struct {
		name        string
		req         admission.Request
		setup       func(*fakeDependents)
		wantAllowed bool
		wantMessage []string
		wantCycle   string
	}{
		{
			name:        "the object of a two-object cycle that sorts first (compute.io before network.io) is allowed",
			req:         vmItem,
			setup:       cycle,
			wantAllowed: true,
			wantCycle:   "virtualmachines.compute.io/default/vm-1,VPC/default/vpc-a",
		},
		{
			name:        "the other object of the cycle waits for it",
			req:         vpcItem,
			setup:       cycle,
			wantMessage: []string{"still referenced by VirtualMachine/default/vm-1"},
		},
		{
			name: "the group sorts before the resource: compute.io/virtualmachines before data.io/databases",
			req:  vmItem,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"db": "db-1"}))
				f.add(consumer, dbs, object("default", "db-1", map[string]any{"vm": "vm-1"}))
			},
			wantAllowed: true,
			wantCycle:   "virtualmachines.compute.io/default/vm-1,Database/default/db-1",
		},
		{
			name: "the group sorts before the resource: the database waits",
			req:  teardownItem(deleteRequest(dbs, consumer, "default", "db-1", nil)),
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"db": "db-1"}))
				f.add(consumer, dbs, object("default", "db-1", map[string]any{"vm": "vm-1"}))
			},
			wantMessage: []string{"still referenced by VirtualMachine/default/vm-1"},
		},
		{
			name: "in a longer cycle, an object of the resource that sorts first whose name sorts later waits",
			req:  teardownItem(deleteRequest(vms, consumer, "default", "vm-b", nil)),
			setup: func(f *fakeDependents) {
				// vpc-a and vpc-b are each other's peers; a VPC's peer
				// is read through a VirtualMachine: vpc-a ← vm-b ← vpc-b
				// ← vm-a ← vpc-a.
				f.add(consumer, vms, object("default", "vm-a", vmRefs("vpc-a")), object("default", "vm-b", vmRefs("vpc-b")))
				f.add(consumer, vpcs, object("default", "vpc-a", gateway("vm-b")), object("default", "vpc-b", gateway("vm-a")))
			},
			wantMessage: []string{"still referenced by VPC/default/vpc-a"},
		},
		{
			name: "in a longer cycle, the other resource waits",
			req:  teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-a", nil)),
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-a", vmRefs("vpc-a")), object("default", "vm-b", vmRefs("vpc-b")))
				f.add(consumer, vpcs, object("default", "vpc-a", gateway("vm-b")), object("default", "vpc-b", gateway("vm-a")))
			},
			wantMessage: []string{"still referenced by VirtualMachine/default/vm-a"},
		},
		{
			name: "the first of a longer cycle is allowed, naming every object on it",
			req:  teardownItem(deleteRequest(vms, consumer, "default", "vm-a", nil)),
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-a", vmRefs("vpc-a")), object("default", "vm-b", vmRefs("vpc-b")))
				f.add(consumer, vpcs, object("default", "vpc-a", gateway("vm-b")), object("default", "vpc-b", gateway("vm-a")))
			},
			wantAllowed: true,
			wantCycle:   "virtualmachines.compute.io/default/vm-a,VirtualMachine/default/vm-b,VPC/default/vpc-a,VPC/default/vpc-b",
		},
		{
			name: "a cycle whose first object has a blocker outside it is not broken",
			req:  vmItem,
			setup: func(f *fakeDependents) {
				cycle(f)
				// vpc-b's gateway is vm-1, but vm-1 does not reference
				// vpc-b: it only waits for vm-1.
				f.add(consumer, vpcs, object("default", "vpc-b", gateway("vm-1")))
			},
			wantMessage: []string{"still referenced by VPC/default/vpc-a, VPC/default/vpc-b"},
		},
		{
			name: "a cycle referenced from outside the namespace torn down is not broken",
			req:  vmItem,
			setup: func(f *fakeDependents) {
				cycle(f)
				f.states = map[schema.GroupVersionResource]index.State{routers: {Phase: index.PhaseSynced, Namespaced: false}}
				f.add(consumer, routers, object("", "edge", map[string]any{"vm": "vm-1"}))
			},
			wantMessage: []string{"Router/edge", "VPC/default/vpc-a"},
		},
		{
			name: "a blocker of another object of the cycle outside the namespace prevents breaking too",
			req:  vmItem,
			setup: func(f *fakeDependents) {
				cycle(f)
				f.states = map[schema.GroupVersionResource]index.State{routers: {Phase: index.PhaseSynced, Namespaced: false}}
				f.add(consumer, routers, object("", "edge", map[string]any{"vpc": "vpc-a"}))
			},
			wantMessage: []string{"still referenced by VPC/default/vpc-a"},
		},
		{
			name: "a dependent of the same name in another namespace is no blocker",
			req:  vmItem,
			setup: func(f *fakeDependents) {
				cycle(f)
				// vm-2 references a vpc-a of its own namespace.
				f.add(consumer, vms, object("other", "vm-2", vmRefs("vpc-a")))
			},
			wantAllowed: true,
			wantCycle:   "virtualmachines.compute.io/default/vm-1,VPC/default/vpc-a",
		},
		{
			name: "a cycle of objects being deleted is no cycle",
			req:  vpcItem,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, terminating(object("default", "vm-1", vmRefs("vpc-a"))))
				f.add(consumer, vpcs, object("default", "vpc-a", gateway("vm-1")))
			},
			wantAllowed: true,
		},
		{
			name:        "a DELETE that is not kcp's teardown never breaks a cycle",
			req:         deleteRequest(vms, consumer, "default", "vm-1", nil),
			setup:       cycle,
			wantMessage: []string{"still referenced by VPC/default/vpc-a"},
		},
		{
			name: "a user's DeleteCollection item never breaks a cycle",
			req: func() admission.Request {
				r := vmItem
				r.UserInfo = authenticationv1.UserInfo{Username: "alice"}
				return r
			}(),
			setup:       cycle,
			wantMessage: []string{"still referenced by VPC/default/vpc-a"},
		},
		{
			name: "a chain that is no cycle is not broken",
			req:  vmItem,
			setup: func(f *fakeDependents) {
				f.add(consumer, vpcs, object("default", "vpc-a", gateway("vm-1")))
			},
			wantMessage: []string{"still referenced by VPC/default/vpc-a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			tt.setup(deps)
			m := newMetrics()
			v := NewValidator(cycleRules, loaded(true), deps, WithNamespaces(deps), WithMetrics(m))
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
				if got := resp.AuditAnnotations[webhook.AuditDecision]; got != webhook.DecisionAllowed {
					t.Errorf("audit %s = %q, want allowed", webhook.AuditDecision, got)
				}
				if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "cycle") || !strings.Contains(resp.Warnings[0], "still reference it") {
					t.Errorf("warnings %v, want one about the cycle", resp.Warnings)
				}
				for _, member := range strings.Split(tt.wantCycle, ",")[1:] {
					if !strings.Contains(resp.Warnings[0], member) {
						t.Errorf("warning %q does not name %s", resp.Warnings[0], member)
					}
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
		})
	}
}

// Both items of a cycle, as kcp's teardown sends them again and again:
// exactly one of them is allowed, and once it is gone the other is.
func TestTeardownOfACycleEnds(t *testing.T) {
	deps := &fakeDependents{}
	deps.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a")))
	deps.add(consumer, vpcs, object("default", "vpc-a", map[string]any{"gatewayVM": "vm-1"}))
	v := NewValidator(cycleRules, loaded(true), deps, WithNamespaces(deps))
	ctx := webhook.WithProvider(context.Background(), provider)
	vmItem := teardownItem(deleteRequest(vms, consumer, "default", "vm-1", nil))
	vpcItem := teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-a", nil))
	for range 2 {
		if resp := v.Handle(ctx, vpcItem); resp.Allowed {
			t.Fatal("vpc-a was allowed while vm-1 exists")
		}
		if resp := v.Handle(ctx, vmItem); !resp.Allowed {
			t.Fatalf("vm-1, where the cycle breaks, was denied: %+v", resp.Result)
		}
	}
	// vm-1 is gone.
	deps.indexed[consumer.String()+"|"+vms.String()] = nil
	if resp := v.Handle(ctx, vpcItem); !resp.Allowed {
		t.Errorf("vpc-a was denied after vm-1 went: %+v", resp.Result)
	}
}

// In a workspace's teardown, every object goes: a cycle between a
// cluster-scoped object and a namespaced one must be broken at one of
// them too, or neither item is ever allowed and the teardown never ends.
func TestTeardownBreaksACycleAcrossScopes(t *testing.T) {
	rules := staticRules{
		// Routers (cluster-scoped) reference VirtualMachines at .spec.vm,
		// VirtualMachines reference Routers at .spec.router.
		vms.GroupResource():     {entry("provider/router", routers, "Router", ".spec.vm")},
		routers.GroupResource(): {entry("provider/vm", vms, "VirtualMachine", ".spec.router")},
	}
	deps := &fakeDependents{states: map[schema.GroupVersionResource]index.State{routers: {Phase: index.PhaseSynced, Namespaced: false}}}
	deps.add(consumer, vms, object("default", "vm-1", map[string]any{"router": "edge"}))
	deps.add(consumer, routers, object("", "edge", map[string]any{"vm": "vm-1"}))
	v := NewValidator(rules, loaded(true), deps, WithNamespaces(deps))
	ctx := webhook.WithProvider(context.Background(), provider)
	vmResp := v.Handle(ctx, teardownItem(deleteRequest(vms, consumer, "default", "vm-1", nil)))
	routerResp := v.Handle(ctx, teardownItem(deleteRequest(routers, consumer, "", "edge", nil)))
	if !vmResp.Allowed && !routerResp.Allowed {
		t.Errorf("neither item of the cycle vm-1 ↔ edge is allowed: vm-1: %s; edge: %s", vmResp.Result.Message, routerResp.Result.Message)
	}
	if vmResp.Allowed && routerResp.Allowed {
		t.Error("both items of the cycle are allowed")
	}
}
