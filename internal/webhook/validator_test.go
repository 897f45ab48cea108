package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/dependents"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

var (
	vpcs    = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}
	vms     = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
	routers = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "routers"}
	dbs     = schema.GroupVersionResource{Group: "data.io", Version: "v1", Resource: "databases"}
)

// fakeLister serves objects from memory like kcp would: namespaced types by
// namespace (and across namespaces), cluster-scoped types only without a
// namespace, and unknown types as not served.
type fakeLister struct {
	// objects by cluster and resource
	objects       map[string][]map[string]any
	clusterScoped map[schema.GroupVersionResource]bool
	err           error
	calls         []string
}

func (f *fakeLister) add(cluster logicalcluster.Name, gvr schema.GroupVersionResource, objs ...map[string]any) {
	if f.objects == nil {
		f.objects = map[string][]map[string]any{}
	}
	key := cluster.String() + "|" + gvr.String()
	f.objects[key] = append(f.objects[key], objs...)
}

func (f *fakeLister) List(_ context.Context, cluster logicalcluster.Name, gvr schema.GroupVersionResource, namespace string, visit func([]byte) error) error {
	f.calls = append(f.calls, fmt.Sprintf("%s %s ns=%s", cluster, gvr.Resource, namespace))
	if f.err != nil {
		return f.err
	}
	objs, ok := f.objects[cluster.String()+"|"+gvr.String()]
	if !ok || namespace != "" && f.clusterScoped[gvr] {
		return fmt.Errorf("%w: %s", dependents.ErrNotServed, gvr)
	}
	for _, o := range objs {
		meta, _ := o["metadata"].(map[string]any)
		if namespace != "" && meta["namespace"] != namespace {
			continue
		}
		raw, err := json.Marshal(o)
		if err != nil {
			return err
		}
		if err := visit(raw); err != nil {
			return err
		}
	}
	return nil
}

type openGate bool

func (g openGate) Initialized() bool { return bool(g) }

func object(namespace, name string, spec map[string]any) map[string]any {
	meta := map[string]any{"name": name, "uid": "uid-" + namespace + "-" + name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	return map[string]any{"apiVersion": "x/v1", "kind": "X", "metadata": meta, "spec": spec}
}

func terminating(o map[string]any) map[string]any {
	o["metadata"].(map[string]any)["deletionTimestamp"] = "2026-01-01T00:00:00Z"
	return o
}

func deleteRequest(gvr schema.GroupVersionResource, cluster logicalcluster.Name, namespace, name string, annotations map[string]string) admission.Request {
	meta := map[string]any{"name": name, "uid": "uid-" + namespace + "-" + name, "annotations": map[string]any{}}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	if cluster != "" {
		meta["annotations"].(map[string]any)[logicalcluster.AnnotationKey] = cluster.String()
	}
	for k, v := range annotations {
		meta["annotations"].(map[string]any)[k] = v
	}
	raw, _ := json.Marshal(map[string]any{"metadata": meta})
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "req-1",
		Operation: admissionv1.Delete,
		Resource:  metav1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource},
		Name:      name, Namespace: namespace,
		UserInfo:  authenticationv1.UserInfo{Username: "alice"},
		OldObject: runtime.RawExtension{Raw: raw},
		DryRun:    ptr.To(false),
	}}
}

func entry(key string, dependent schema.GroupVersionResource, kind string, paths ...string) registry.Entry {
	e := registry.Entry{RuleKey: key, Dependent: dependent, DependentKind: kind}
	for _, p := range paths {
		e.Paths = append(e.Paths, fieldpath.MustParse(p))
	}
	return e
}

type staticRules map[schema.GroupResource][]registry.Entry

func (s staticRules) FindByTargetGVR(gvr schema.GroupVersionResource) []registry.Entry {
	return s[gvr.GroupResource()]
}

func TestDeletionValidator(t *testing.T) {
	const consumer, other = logicalcluster.Name("consumer"), logicalcluster.Name("other")
	vmRule := staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name", ".spec.nics[*].vpc")}}

	tests := []struct {
		name        string
		rules       staticRules
		gate        bool
		setup       func(*fakeLister)
		req         admission.Request
		wantAllowed bool
		wantCode    int32
		wantMessage []string
		wantNot     []string
		wantWarning string
		wantAudit   map[string]string
		wantCalls   []string
	}{
		{
			name: "not a delete", rules: vmRule, gate: true,
			req: func() admission.Request {
				r := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
				r.Operation = admissionv1.Update
				return r
			}(),
			wantAllowed: true,
		},
		{
			name: "not initialized", rules: vmRule, gate: false,
			req:      deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode: http.StatusServiceUnavailable, wantMessage: []string{"has not loaded all DependencyRules yet", "retry"},
		},
		{
			name: "referenced by one dependent", rules: vmRule, gate: true,
			setup: func(f *fakeLister) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
				f.add(consumer, vms, object("default", "vm-2", map[string]any{"vpcRef": map[string]any{"name": "vpc-b"}}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{`vpcs.network.io "vpc-a" in namespace "default" is still referenced by VirtualMachine/default/vm-1;`},
			wantNot:     []string{"vm-2"},
			wantAudit:   map[string]string{AuditDecision: "denied", AuditBlockers: "1"},
			wantCalls:   []string{"consumer virtualmachines ns=default"},
		},
		{
			name: "dry-run gets the same answer", rules: vmRule, gate: true,
			setup: func(f *fakeLister) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req: func() admission.Request {
				r := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
				r.DryRun = ptr.To(true)
				return r
			}(),
			wantCode: http.StatusForbidden, wantMessage: []string{"VirtualMachine/default/vm-1"},
		},
		{
			name: "referenced through a [*] path", rules: vmRule, gate: true,
			setup: func(f *fakeLister) {
				f.add(consumer, vms, object("default", "vm-3", map[string]any{"nics": []any{map[string]any{"vpc": "vpc-x"}, map[string]any{"vpc": "vpc-a"}}}))
			},
			req:      deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode: http.StatusForbidden, wantMessage: []string{"VirtualMachine/default/vm-3"},
		},
		{
			name: "dependents in other namespaces and workspaces do not block", rules: vmRule, gate: true,
			setup: func(f *fakeLister) {
				f.add(consumer, vms, object("other-ns", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
				f.add(other, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
		},
		{
			name: "terminating dependent does not block", rules: vmRule, gate: true,
			setup: func(f *fakeLister) {
				f.add(consumer, vms, terminating(object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}})))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
		},
		{
			name: "skip-protection allows with a warning and an audit annotation", rules: vmRule, gate: true,
			setup: func(f *fakeLister) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", map[string]string{depv1alpha1.AnnotationSkipProtection: "true"}),
			wantAllowed: true,
			wantWarning: "bypassed by alice",
			wantAudit:   map[string]string{AuditDecision: "bypassed", AuditSkipProtectionBy: "alice"},
		},
		{
			name: "skip-protection with another value does not bypass", rules: vmRule, gate: true,
			setup: func(f *fakeLister) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req:      deleteRequest(vpcs, consumer, "default", "vpc-a", map[string]string{depv1alpha1.AnnotationSkipProtection: "yes"}),
			wantCode: http.StatusForbidden,
		},
		{
			name: "unprotected resource", rules: vmRule, gate: true,
			req:         deleteRequest(routers, consumer, "default", "r", nil),
			wantAllowed: true,
		},
		{
			name: "cluster-scoped target: dependents anywhere in the workspace", gate: true,
			rules: staticRules{routers.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.router")}},
			setup: func(f *fakeLister) {
				f.add(consumer, vms, object("ns-1", "vm-1", map[string]any{"router": "edge"}), object("ns-2", "vm-2", map[string]any{"router": "edge"}))
			},
			req:         deleteRequest(routers, consumer, "", "edge", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{`routers.network.io "edge" is still referenced by VirtualMachine/ns-1/vm-1, VirtualMachine/ns-2/vm-2;`},
			wantCalls:   []string{"consumer virtualmachines ns="},
		},
		{
			name: "cluster-scoped dependent of a namespaced target is listed cluster-wide", gate: true,
			rules: staticRules{vpcs.GroupResource(): {entry("p/router", routers, "Router", ".spec.vpc")}},
			setup: func(f *fakeLister) {
				f.clusterScoped = map[schema.GroupVersionResource]bool{routers: true}
				f.add(consumer, routers, object("", "edge", map[string]any{"vpc": "vpc-a"}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"Router/edge;"},
			wantCalls:   []string{"consumer routers ns=default", "consumer routers ns="},
		},
		{
			name: "dependent type not bound in the workspace", rules: vmRule, gate: true,
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
			wantCalls:   []string{"consumer virtualmachines ns=default", "consumer virtualmachines ns="},
		},
		{
			name: "an object referencing itself does not block its deletion", gate: true,
			rules: staticRules{vpcs.GroupResource(): {entry("p/vpc", vpcs, "VPC", ".spec.peer")}},
			setup: func(f *fakeLister) {
				f.add(consumer, vpcs, object("default", "vpc-a", map[string]any{"peer": "vpc-a"}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
		},
		{
			name: "each dependent type is listed once for several rules and paths", gate: true,
			rules: staticRules{vpcs.GroupResource(): {
				entry("p1/vm", vms, "VirtualMachine", ".spec.vpcRef.name"),
				entry("p2/vm", vms, "VirtualMachine", ".spec.backupVPC", ".spec.vpcRef.name"),
				entry("p3/db", dbs, "Database", ".spec.vpc"),
			}},
			setup: func(f *fakeLister) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"backupVPC": "vpc-a"}))
				f.add(consumer, dbs, object("default", "db-1", map[string]any{"vpc": "vpc-a"}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"Database/default/db-1, VirtualMachine/default/vm-1;"},
			wantCalls:   []string{"consumer virtualmachines ns=default", "consumer databases ns=default"},
		},
		{
			name: "many blockers are capped", rules: vmRule, gate: true,
			setup: func(f *fakeLister) {
				for i := range 13 {
					f.add(consumer, vms, object("default", fmt.Sprintf("vm-%02d", 12-i), map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
				}
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"VirtualMachine/default/vm-00, VirtualMachine/default/vm-01,", "VirtualMachine/default/vm-09 and 3 more;"},
			wantNot:     []string{"vm-10"},
			wantAudit:   map[string]string{AuditDecision: "denied", AuditBlockers: "13"},
		},
		{
			name: "listing fails: fail closed with a retryable message", rules: vmRule, gate: true,
			setup:       func(f *fakeLister) { f.err = errors.New("connection refused") },
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusServiceUnavailable,
			wantMessage: []string{"could not check whether vpcs \"vpc-a\" is still referenced", "connection refused", "retry"},
			wantAudit:   map[string]string{AuditDecision: "error", AuditFailedRule: "p/vm"},
		},
		{
			name: "no kcp.io/cluster annotation", rules: vmRule, gate: true,
			req:      deleteRequest(vpcs, "", "default", "vpc-a", nil),
			wantCode: http.StatusBadRequest, wantMessage: []string{logicalcluster.AnnotationKey},
		},
		{
			name: "no oldObject", rules: vmRule, gate: true,
			req: func() admission.Request {
				r := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
				r.OldObject.Raw = nil
				return r
			}(),
			wantCode: http.StatusBadRequest, wantMessage: []string{"no oldObject"},
		},
		{
			name: "malformed oldObject", rules: vmRule, gate: true,
			req: func() admission.Request {
				r := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
				r.OldObject.Raw = []byte(`{"metadata": [`)
				return r
			}(),
			wantCode: http.StatusBadRequest, wantMessage: []string{"failed to decode oldObject"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lister := &fakeLister{}
			if tt.setup != nil {
				tt.setup(lister)
			}
			v := NewDeletionValidator(tt.rules, openGate(tt.gate), lister)
			resp := v.Handle(context.Background(), tt.req)

			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
				if !tt.wantAllowed && resp.Result.Code != tt.wantCode {
					t.Errorf("code = %d, want %d (%s)", resp.Result.Code, tt.wantCode, msg)
				}
			}
			for _, want := range tt.wantMessage {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not contain %q", msg, want)
				}
			}
			for _, not := range tt.wantNot {
				if strings.Contains(msg, not) {
					t.Errorf("message %q contains %q", msg, not)
				}
			}
			if tt.wantWarning != "" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], tt.wantWarning)) {
				t.Errorf("warnings = %v, want one containing %q", resp.Warnings, tt.wantWarning)
			}
			for k, want := range tt.wantAudit {
				if got := resp.AuditAnnotations[k]; got != want {
					t.Errorf("audit annotation %s = %q, want %q", k, got, want)
				}
			}
			if tt.wantCalls != nil && strings.Join(lister.calls, "; ") != strings.Join(tt.wantCalls, "; ") {
				t.Errorf("lists = %v, want %v", lister.calls, tt.wantCalls)
			}
		})
	}
}

func TestDeletionValidatorRemembersScope(t *testing.T) {
	rules := staticRules{vpcs.GroupResource(): {entry("p/router", routers, "Router", ".spec.vpc")}}
	lister := &fakeLister{clusterScoped: map[schema.GroupVersionResource]bool{routers: true}}
	lister.add("consumer", routers, object("", "edge", map[string]any{"vpc": "vpc-b"}))
	v := NewDeletionValidator(rules, openGate(true), lister)

	for range 2 {
		if resp := v.Handle(context.Background(), deleteRequest(vpcs, "consumer", "default", "vpc-a", nil)); !resp.Allowed {
			t.Fatalf("denied: %+v", resp.Result)
		}
	}
	want := []string{"consumer routers ns=default", "consumer routers ns=", "consumer routers ns="}
	if strings.Join(lister.calls, "; ") != strings.Join(want, "; ") {
		t.Errorf("lists = %v, want %v: the second request should list cluster-wide directly", lister.calls, want)
	}
}

func TestDeniedMessage(t *testing.T) {
	blockers := []Blocker{{"VM", "b", "x"}, {"DB", "", "z"}, {"VM", "a", "y"}, {"VM", "a", "y"}}
	got := deniedMessage(vpcs.GroupResource(), "", "v", blockers, 2)
	want := `vpcs.network.io "v" is still referenced by DB/z, VM/a/y and 1 more; delete these or remove their references first`
	if got != want {
		t.Errorf("deniedMessage() =\n  %s\nwant\n  %s", got, want)
	}
}
