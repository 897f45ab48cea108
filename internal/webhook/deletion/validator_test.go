package deletion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

var (
	vpcs    = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}
	vms     = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
	routers = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "routers"}
	dbs     = schema.GroupVersionResource{Group: "data.io", Version: "v1", Resource: "databases"}
)

// fakeDependents emulates the index: indexed objects are found by Hits and
// by Confirm, objects in live only by Confirm (the index has not seen them
// yet). Objects are stored by cluster and resource; namespaced resources are
// listed in a namespace, cluster-scoped ones (states[...].Namespaced false)
// across the cluster.
type fakeDependents struct {
	indexed map[string][]map[string]any
	live    map[string][]map[string]any
	states  map[schema.GroupVersionResource]index.State
	err     error
	// calls records the live reads, "cluster resource ns=namespace".
	calls []string
	// elsewhere are the workspaces on shards the webhook does not read.
	elsewhere map[logicalcluster.Name]bool
	// unfenced are the dependent resources for which the index has not
	// caught up with a teardown (see Fenced); queries records the queries
	// of Confirm.
	unfenced map[schema.GroupVersionResource]bool
	queries  []index.Query
	// terminatingNamespaces are the namespaces being deleted.
	terminatingNamespaces map[string]bool
	// encoded caches the JSON of each object (they do not change once
	// added).
	encoded map[unsafe.Pointer][]byte
}

// encode returns the JSON of o.
func (f *fakeDependents) encode(o map[string]any) []byte {
	p := reflect.ValueOf(o).UnsafePointer()
	if raw, ok := f.encoded[p]; ok {
		return raw
	}
	raw, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	if f.encoded == nil {
		f.encoded = map[unsafe.Pointer][]byte{}
	}
	f.encoded[p] = raw
	return raw
}

// Fenced reports the index caught up unless the resource is unfenced.
func (f *fakeDependents) Fenced(_ context.Context, q index.Query, _ time.Time) (bool, error) {
	return !f.unfenced[q.Source.Resource], nil
}

// NamespaceTerminating reports the namespaces in terminatingNamespaces as
// being deleted.
func (f *fakeDependents) NamespaceTerminating(_ context.Context, _ index.Source, _ logicalcluster.Name, namespace string) (bool, error) {
	return f.terminatingNamespaces[namespace], nil
}

func (f *fakeDependents) Serves(_ context.Context, _ index.Source, cluster logicalcluster.Name) error {
	if f.elsewhere[cluster] {
		return fmt.Errorf("logical cluster %s is %w, shard-1", cluster, index.ErrNotServed)
	}
	return nil
}

func (f *fakeDependents) add(cluster logicalcluster.Name, gvr schema.GroupVersionResource, objs ...map[string]any) {
	if f.indexed == nil {
		f.indexed = map[string][]map[string]any{}
	}
	f.indexed[cluster.String()+"|"+gvr.String()] = append(f.indexed[cluster.String()+"|"+gvr.String()], objs...)
}

// addLive adds dependents in the consumer workspace that only a live read
// finds: the index has not seen them yet.
func (f *fakeDependents) addLive(gvr schema.GroupVersionResource, objs ...map[string]any) {
	if f.live == nil {
		f.live = map[string][]map[string]any{}
	}
	f.live[consumer.String()+"|"+gvr.String()] = append(f.live[consumer.String()+"|"+gvr.String()], objs...)
}

func (f *fakeDependents) State(src index.Source) index.State {
	if s, ok := f.states[src.Resource]; ok {
		return s
	}
	return index.State{Phase: index.PhaseSynced, Namespaced: true}
}

func namespaceOf(o map[string]any) string {
	ns, _ := o["metadata"].(map[string]any)["namespace"].(string)
	return ns
}

func (f *fakeDependents) Hits(src index.Source, paths []fieldpath.Reference, cluster logicalcluster.Name, namespace, name string) []kcp.Meta {
	return f.matching(f.indexed[cluster.String()+"|"+src.Resource.String()], paths, cluster, namespace, name, false)
}

// matching returns the objects in namespace (or, if it is empty, anywhere)
// that hold name at one of paths; cluster-scoped objects match any
// namespace unless exact. A path that reads the namespace next to the name
// matches where the reference names namespace (see fieldpath.RefersTo).
func (f *fakeDependents) matching(objs []map[string]any, paths []fieldpath.Reference, cluster logicalcluster.Name, namespace, name string, exact bool) []kcp.Meta {
	var out []kcp.Meta
	for _, o := range objs {
		ns := namespaceOf(o)
		inScope := namespace == "" || ns == namespace || !exact && ns == ""
		raw := f.encode(o)
		for _, p := range paths {
			values, err := p.ResolveJSON(raw)
			if err != nil {
				continue
			}
			if slices.ContainsFunc(values, func(v fieldpath.Value) bool {
				if p.CrossesNamespaces() {
					return v.Name == name && fieldpath.RefersTo(v.Namespace, ns, namespace)
				}
				return inScope && v == fieldpath.Value{Name: name}
			}) {
				meta := o["metadata"].(map[string]any)
				_, terminating := meta["deletionTimestamp"]
				out = append(out, kcp.Meta{Cluster: cluster, Namespace: ns, Name: meta["name"].(string), UID: types.UID(meta["uid"].(string)), Terminating: terminating})
				break
			}
		}
	}
	return out
}

// Confirm reads the scope the index would read: the namespace for a
// namespaced dependent type, the whole workspace otherwise.
func (f *fakeDependents) Confirm(_ context.Context, q index.Query) ([]kcp.Meta, int, error) {
	f.queries = append(f.queries, q)
	src, paths, cluster, namespace, name := q.Source, q.Paths, q.Cluster, q.Namespace, q.Name
	if !f.State(src).Namespaced {
		namespace = ""
	}
	f.calls = append(f.calls, fmt.Sprintf("%s %s ns=%s", cluster, src.Resource.Resource, namespace))
	if f.err != nil {
		return nil, 0, f.err
	}
	if state := f.State(src); state.Phase == index.PhaseVersionNotServed {
		return nil, 0, fmt.Errorf("%w: %s", index.ErrVersionNotServed, state.Message)
	}
	key := cluster.String() + "|" + src.Resource.String()
	objs := append(slices.Clone(f.indexed[key]), f.live[key]...)
	scanned := 0
	for _, o := range objs {
		if namespace == "" || namespaceOf(o) == namespace {
			scanned++
		}
	}
	return f.matching(objs, paths, cluster, namespace, name, true), scanned, nil
}

type loaded bool

func (l loaded) Loaded() bool { return bool(l) }

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

// kinds are the kinds of the tests' resources.
var kinds = map[string]string{"vpcs": "VPC", "virtualmachines": "VirtualMachine", "routers": "Router", "databases": "Database"}

func deleteRequest(gvr schema.GroupVersionResource, cluster logicalcluster.Name, namespace, name string, annotations map[string]string) admission.Request {
	meta := map[string]any{"name": name, "uid": "uid-" + namespace + "-" + name, "resourceVersion": "7", "annotations": map[string]any{}}
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
		Kind:      metav1.GroupVersionKind{Group: gvr.Group, Version: gvr.Version, Kind: kinds[gvr.Resource]},
		Name:      name, Namespace: namespace,
		UserInfo:  authenticationv1.UserInfo{Username: "alice"},
		OldObject: runtime.RawExtension{Raw: raw},
		DryRun:    ptr.To(false),
	}}
}

// provider is the provider workspace whose webhook configuration the tests'
// requests come through.
const (
	provider = logicalcluster.Name("provider")
	consumer = logicalcluster.Name("consumer")
)

func entry(key string, dependent schema.GroupVersionResource, kind string, paths ...string) registry.Entry {
	cluster, name, _ := strings.Cut(key, "/")
	e := registry.Entry{
		Rule:          kcp.ObjectKey{Cluster: logicalcluster.Name(cluster), Name: name},
		Dependent:     index.Source{Export: kcp.ObjectKey{Cluster: logicalcluster.Name(cluster), Name: dependent.Group}, Resource: dependent},
		DependentKind: kind,
	}
	for _, p := range paths {
		e.Paths = append(e.Paths, fieldpathtest.MustParse(p))
	}
	return e
}

// staticRules are the rules of the provider workspace, by resource.
type staticRules map[schema.GroupResource][]registry.Entry

func (s staticRules) Find(t registry.Target) []registry.Entry {
	if t.Cluster != provider {
		return nil
	}
	return s[t.Resource]
}

// Labelling implements LabellingFinder: no dependents are labelled.
func (s staticRules) Labelling(registry.Target) (registry.Labelling, bool) {
	return registry.Labelling{}, false
}

func TestDeletionValidator(t *testing.T) {
	const other = logicalcluster.Name("other")
	vmRule := staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name", ".spec.nics[*].vpc")}}

	tests := []struct {
		name        string
		rules       staticRules
		loaded      bool
		setup       func(*fakeDependents)
		req         admission.Request
		wantAllowed bool
		wantCode    int32
		wantMessage []string
		wantNot     []string
		wantWarning string
		wantAudit   map[string]string
		wantCalls   []string
		// provider is the provider workspace of the request, if not
		// "provider".
		provider logicalcluster.Name
	}{
		{
			name: "not a delete", rules: vmRule, loaded: true,
			req: func() admission.Request {
				r := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
				r.Operation = admissionv1.Update
				return r
			}(),
			wantAllowed: true,
		},
		{
			name: "not initialized", rules: vmRule, loaded: false,
			req:      deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode: http.StatusServiceUnavailable, wantMessage: []string{"has not loaded all DependencyRules yet", "retry"},
		},
		{
			name: "a webhook that reads only some shards refuses a workspace on another one, rather than allowing", rules: vmRule, loaded: true,
			setup:       func(f *fakeDependents) { f.elsewhere = map[logicalcluster.Name]bool{consumer: true} },
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusMisdirectedRequest,
			wantMessage: []string{"does not answer for this workspace", "not served by the shards this webhook reads", "kcp must call the webhook of the shard that serves it"},
			wantAudit:   map[string]string{webhook.AuditDecision: "error"},
		},
		{
			name: "a webhook that reads only some shards denies from its index as before", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
				f.elsewhere = map[logicalcluster.Name]bool{other: true}
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"VirtualMachine/default/vm-1"},
		},
		{
			name: "referenced by one dependent", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
				f.add(consumer, vms, object("default", "vm-2", map[string]any{"vpcRef": map[string]any{"name": "vpc-b"}}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{`vpcs.network.io "vpc-a" in namespace "default" is still referenced by VirtualMachine/default/vm-1;`},
			wantNot:     []string{"vm-2"},
			wantAudit:   map[string]string{webhook.AuditDecision: "denied", AuditBlockers: "1"},
			wantCalls:   []string{}, // a hit in the index needs no live read
		},
		{
			name: "a dependent the index has not seen yet is found by the live read", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.addLive(vms, object("default", "vm-new", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"still referenced by VirtualMachine/default/vm-new;"},
			wantCalls:   []string{"consumer virtualmachines ns=default"},
		},
		{
			name: "another provider's resource of the same name is not protected", rules: vmRule, loaded: true, provider: "other-provider",
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
			wantCalls:   []string{},
		},
		{
			name: "rules whose provider has not granted access to its dependents have no effect", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.states = map[schema.GroupVersionResource]index.State{vms: {Phase: index.PhaseAccessDenied}}
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
			wantCalls:   []string{},
		},
		{
			name: "a dependent version the export does not serve refuses the delete, saying why", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.states = map[schema.GroupVersionResource]index.State{vms: {Phase: index.PhaseVersionNotServed, Namespaced: true, Message: "serves v2, not v1"}}
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{`cannot check whether vpcs.network.io "vpc-a" is still referenced`, "serves v2, not v1"},
			wantAudit:   map[string]string{webhook.AuditDecision: "error", AuditFailedRule: "p/vm"},
		},
		{
			name: "dry-run gets the same answer", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
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
			name: "referenced through a [*] path", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-3", map[string]any{"nics": []any{map[string]any{"vpc": "vpc-x"}, map[string]any{"vpc": "vpc-a"}}}))
			},
			req:      deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode: http.StatusForbidden, wantMessage: []string{"VirtualMachine/default/vm-3"},
		},
		{
			name: "dependents in other namespaces and workspaces do not block", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("other-ns", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
				f.add(other, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
		},
		{
			name: "terminating dependent does not block", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, terminating(object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}})))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
		},
		{
			name: "skip-protection set by a user who may delete allows, with a warning and audit annotations naming who deleted and who set it", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req: deleteRequest(vpcs, consumer, "default", "vpc-a", map[string]string{depv1alpha1.AnnotationSkipProtection: "true",
				depv1alpha1.AnnotationSkipProtectionSetBy: `{"user":"admin","setAt":"2026-11-26T10:00:00Z"}`}),
			wantAllowed: true,
			wantWarning: "bypassed by alice with the dependencies.opendefense.cloud/skip-protection annotation, set by admin at 2026-11-26T10:00:00Z",
			wantAudit:   map[string]string{webhook.AuditDecision: "bypassed", AuditSkipProtectionBy: "alice", AuditSkipProtectionSetBy: "admin"},
		},
		{
			name: "skip-protection without a record of who set it has no effect, and the denial says so", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", map[string]string{depv1alpha1.AnnotationSkipProtection: "true"}),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"is still referenced by VirtualMachine/default/vm-1"},
			wantWarning: "skip-protection=true on vpcs \"vpc-a\" has no effect: it was not set by a user who may delete the object",
			wantAudit:   map[string]string{webhook.AuditDecision: "denied", AuditSkipProtection: "no-effect"},
		},
		{
			name: "skip-protection with a record that names nobody has no effect", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req: deleteRequest(vpcs, consumer, "default", "vpc-a", map[string]string{depv1alpha1.AnnotationSkipProtection: "true",
				depv1alpha1.AnnotationSkipProtectionSetBy: `not a record`}),
			wantCode:    http.StatusForbidden,
			wantWarning: "has no effect",
			wantAudit:   map[string]string{AuditSkipProtection: "no-effect"},
		},
		{
			name: "skip-protection without a record on an object nothing references: allowed, no warning", rules: vmRule, loaded: true,
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", map[string]string{depv1alpha1.AnnotationSkipProtection: "true"}),
			wantAllowed: true,
		},
		{
			name: "skip-protection with another value does not bypass", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
			},
			req:      deleteRequest(vpcs, consumer, "default", "vpc-a", map[string]string{depv1alpha1.AnnotationSkipProtection: "yes"}),
			wantCode: http.StatusForbidden,
		},
		{
			name: "unprotected resource", rules: vmRule, loaded: true,
			req:         deleteRequest(routers, consumer, "default", "r", nil),
			wantAllowed: true,
		},
		{
			name: "cluster-scoped target: dependents anywhere in the workspace", loaded: true,
			rules: staticRules{routers.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.router")}},
			setup: func(f *fakeDependents) {
				f.add(consumer, vms, object("ns-1", "vm-1", map[string]any{"router": "edge"}), object("ns-2", "vm-2", map[string]any{"router": "edge"}))
			},
			req:         deleteRequest(routers, consumer, "", "edge", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{`routers.network.io "edge" is still referenced by VirtualMachine/ns-1/vm-1, VirtualMachine/ns-2/vm-2;`},
			wantCalls:   []string{},
		},
		{
			name: "cluster-scoped target: the live read covers the whole workspace", loaded: true,
			rules: staticRules{routers.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.router")}},
			setup: func(f *fakeDependents) {
				f.addLive(vms, object("ns-2", "vm-2", map[string]any{"router": "edge"}))
			},
			req:         deleteRequest(routers, consumer, "", "edge", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"VirtualMachine/ns-2/vm-2;"},
			wantCalls:   []string{"consumer virtualmachines ns="},
		},
		{
			name: "cluster-scoped dependent of a namespaced target is listed cluster-wide", loaded: true,
			rules: staticRules{vpcs.GroupResource(): {entry("p/router", routers, "Router", ".spec.vpc")}},
			setup: func(f *fakeDependents) {
				f.states = map[schema.GroupVersionResource]index.State{routers: {Phase: index.PhaseSynced, Namespaced: false}}
				f.addLive(routers, object("", "edge", map[string]any{"vpc": "vpc-a"}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"Router/edge;"},
			wantCalls:   []string{"consumer routers ns="},
		},
		{
			name: "dependent type not bound in the workspace", rules: vmRule, loaded: true,
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
			wantCalls:   []string{"consumer virtualmachines ns=default"},
		},
		{
			name: "an object referencing itself does not block its deletion", loaded: true,
			rules: staticRules{vpcs.GroupResource(): {entry("p/vpc", vpcs, "VPC", ".spec.peer")}},
			setup: func(f *fakeDependents) {
				f.add(consumer, vpcs, object("default", "vpc-a", map[string]any{"peer": "vpc-a"}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantAllowed: true,
		},
		{
			name: "each dependent type is listed once for several rules and paths", loaded: true,
			rules: staticRules{vpcs.GroupResource(): {
				entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name"),
				entry("p/vm-backup", vms, "VirtualMachine", ".spec.backupVPC", ".spec.vpcRef.name"),
				entry("p/db", dbs, "Database", ".spec.vpc"),
			}},
			setup: func(f *fakeDependents) {
				f.addLive(vms, object("default", "vm-1", map[string]any{"backupVPC": "vpc-a"}))
				f.addLive(dbs, object("default", "db-1", map[string]any{"vpc": "vpc-a"}))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"Database/default/db-1, VirtualMachine/default/vm-1;"},
			wantCalls:   []string{"consumer virtualmachines ns=default", "consumer databases ns=default"},
		},
		{
			name: "many blockers are capped", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				for i := range 13 {
					f.add(consumer, vms, object("default", fmt.Sprintf("vm-%02d", 12-i), map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}}))
				}
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusForbidden,
			wantMessage: []string{"VirtualMachine/default/vm-00, VirtualMachine/default/vm-01,", "VirtualMachine/default/vm-09 and 3 more;"},
			wantNot:     []string{"vm-10"},
			wantAudit:   map[string]string{webhook.AuditDecision: "denied", AuditBlockers: "13"},
		},
		{
			name: "a read that fails is a denial with a retry message, read once", rules: vmRule, loaded: true,
			setup: func(f *fakeDependents) {
				f.err = apierrors.NewForbidden(vms.GroupResource(), "", errors.New("access denied"))
			},
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusServiceUnavailable,
			wantMessage: []string{"access denied"},
			wantCalls:   []string{"consumer virtualmachines ns=default"},
		},
		{
			name: "listing fails: fail closed with a retryable message", rules: vmRule, loaded: true,
			setup:       func(f *fakeDependents) { f.err = errors.New("connection refused") },
			req:         deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode:    http.StatusServiceUnavailable,
			wantMessage: []string{"could not check whether vpcs \"vpc-a\" is still referenced", "connection refused", "retry"},
			wantAudit:   map[string]string{webhook.AuditDecision: "error", AuditFailedRule: "p/vm"},
		},
		{
			name: "no kcp.io/cluster annotation", rules: vmRule, loaded: true,
			req:      deleteRequest(vpcs, "", "default", "vpc-a", nil),
			wantCode: http.StatusBadRequest, wantMessage: []string{logicalcluster.AnnotationKey},
		},
		{
			name: "a kcp.io/cluster annotation that is not a logical cluster name is refused before anything is read", rules: vmRule, loaded: true,
			req:      deleteRequest(vpcs, "root:victim/api/v1/namespaces/default/secrets?", "default", "vpc-a", nil),
			wantCode: http.StatusBadRequest, wantMessage: []string{"is not a logical cluster name"},
			wantCalls: []string{},
		},
		{
			name: "a request without a provider workspace is refused", rules: vmRule, loaded: true, provider: "-",
			req:      deleteRequest(vpcs, consumer, "default", "vpc-a", nil),
			wantCode: http.StatusBadRequest, wantMessage: []string{"names no provider workspace"},
		},
		{
			name: "no oldObject", rules: vmRule, loaded: true,
			req: func() admission.Request {
				r := deleteRequest(vpcs, consumer, "default", "vpc-a", nil)
				r.OldObject.Raw = nil
				return r
			}(),
			wantCode: http.StatusBadRequest, wantMessage: []string{"no oldObject"},
		},
		{
			name: "malformed oldObject", rules: vmRule, loaded: true,
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
			deps := &fakeDependents{}
			if tt.setup != nil {
				tt.setup(deps)
			}
			v := NewValidator(tt.rules, loaded(tt.loaded), deps, WithNamespaces(deps))
			ctx := webhook.WithProvider(context.Background(), provider)
			switch tt.provider {
			case "":
			case "-":
				ctx = context.Background()
			default:
				ctx = webhook.WithProvider(context.Background(), tt.provider)
			}
			resp := v.Handle(ctx, tt.req)

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
			if strings.Contains(msg, "is still referenced by") {
				// Every denial lists its blockers for tools, with their number.
				causes := resp.Result.Details.Causes
				if len(causes) == 0 || causes[len(causes)-1].Type != CauseBlockers || causes[0].Type != CauseBlocker {
					t.Errorf("details %+v of a denial do not list the blockers", resp.Result.Details)
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
			if tt.wantWarning == "" && len(resp.Warnings) > 0 {
				t.Errorf("warnings = %v, want none", resp.Warnings)
			}
			for k, want := range tt.wantAudit {
				if got := resp.AuditAnnotations[k]; got != want {
					t.Errorf("audit annotation %s = %q, want %q", k, got, want)
				}
			}
			if tt.wantCalls != nil && strings.Join(deps.calls, "; ") != strings.Join(tt.wantCalls, "; ") {
				t.Errorf("live reads = %v, want %v", deps.calls, tt.wantCalls)
			}
		})
	}
}

// The scope of a dependent type is that of the APIExport that serves it,
// whatever another export serves under the same name.
func TestScopeIsThatOfTheDependentsExport(t *testing.T) {
	rules := staticRules{vpcs.GroupResource(): {
		entry("p1/router", routers, "Router", ".spec.vpc"),
		entry("p2/router", routers.GroupResource().WithVersion("v2"), "Router", ".spec.vpc"),
	}}
	deps := &fakeDependents{states: map[schema.GroupVersionResource]index.State{
		routers: {Phase: index.PhaseSynced, Namespaced: false},
		routers.GroupResource().WithVersion("v2"): {Phase: index.PhaseSynced, Namespaced: true},
	}}
	v := NewValidator(rules, loaded(true), deps, WithNamespaces(deps))
	if resp := v.Handle(webhook.WithProvider(context.Background(), provider), deleteRequest(vpcs, "consumer", "default", "vpc-a", nil)); !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	want := []string{"consumer routers ns=", "consumer routers ns=default"}
	if strings.Join(deps.calls, "; ") != strings.Join(want, "; ") {
		t.Errorf("live reads = %v, want %v", deps.calls, want)
	}
}

// teardownItem is a DELETE as kcp's namespace controller sends it for an
// item of a DeleteCollection: no name in the request, kcp's own user.
func teardownItem(req admission.Request) admission.Request {
	req.Name = ""
	req.UserInfo = authenticationv1.UserInfo{Username: "system:apiserver", Groups: []string{"system:masters"}}
	return req
}

// Items of kcp's teardown are decided from the index alone once every
// dependent type is indexed; everything else keeps its confirming read.
func TestTeardownItemsAreDecidedFromTheIndex(t *testing.T) {
	vmRule := staticRules{vpcs.GroupResource(): {entry("p/vm", vms, "VirtualMachine", ".spec.vpcRef.name")}}
	vmRefs := func(vpc string) map[string]any { return map[string]any{"vpcRef": map[string]any{"name": vpc}} }
	item := teardownItem(deleteRequest(vpcs, consumer, "default", "vpc-a", nil))
	tests := []struct {
		name        string
		req         admission.Request
		setup       func(*fakeDependents)
		wantAllowed bool
		wantCalls   []string
		wantVia     string
	}{
		{
			name:        "a miss allows without a live read",
			req:         item,
			wantAllowed: true, wantCalls: []string{}, wantVia: viaTeardown,
		},
		{
			name:      "an indexed dependent denies, so that dependents go first",
			req:       item,
			setup:     func(f *fakeDependents) { f.add(consumer, vms, object("default", "vm-1", vmRefs("vpc-a"))) },
			wantCalls: []string{}, wantVia: viaIndex,
		},
		{
			name: "an indexed dependent that is being deleted does not deny",
			req:  item,
			setup: func(f *fakeDependents) {
				vm := object("default", "vm-1", vmRefs("vpc-a"))
				vm["metadata"].(map[string]any)["deletionTimestamp"] = "2026-01-01T00:00:00Z"
				f.add(consumer, vms, vm)
			},
			wantAllowed: true, wantCalls: []string{}, wantVia: viaTeardown,
		},
		{
			name: "while a dependent type is still being listed, the miss is read live",
			req:  item,
			setup: func(f *fakeDependents) {
				f.states = map[schema.GroupVersionResource]index.State{vms: {Phase: index.PhaseSyncing, Namespaced: true}}
				f.addLive(vms, object("default", "vm-new", vmRefs("vpc-a")))
			},
			wantCalls: []string{"consumer virtualmachines ns=default"}, wantVia: viaLive,
		},
		{
			name: "a user's DeleteCollection item keeps the confirming read",
			req: func() admission.Request {
				r := item
				r.UserInfo = authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}
				return r
			}(),
			setup:     func(f *fakeDependents) { f.addLive(vms, object("default", "vm-new", vmRefs("vpc-a"))) },
			wantCalls: []string{"consumer virtualmachines ns=default"}, wantVia: viaLive,
		},
		{
			name: "a single DELETE by kcp itself (the garbage collector names the object) keeps the confirming read",
			req: func() admission.Request {
				r := item
				r.Name = "vpc-a"
				return r
			}(),
			wantAllowed: true, wantCalls: []string{"consumer virtualmachines ns=default"}, wantVia: viaLive,
		},
		{
			name: "the system:apiserver user without kcp's group keeps the confirming read",
			req: func() admission.Request {
				r := item
				r.UserInfo.Groups = nil
				return r
			}(),
			wantAllowed: true, wantCalls: []string{"consumer virtualmachines ns=default"}, wantVia: viaLive,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			deps := &fakeDependents{}
			if tt.setup != nil {
				tt.setup(deps)
			}
			v := NewValidator(vmRule, loaded(true), deps, WithNamespaces(deps))
			resp, d := v.handle(webhook.WithProvider(context.Background(), provider), tt.req)
			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if d.via != tt.wantVia {
				t.Errorf("decided via %q, want %q", d.via, tt.wantVia)
			}
			if strings.Join(deps.calls, "; ") != strings.Join(tt.wantCalls, "; ") {
				t.Errorf("live reads = %v, want %v", deps.calls, tt.wantCalls)
			}
		})
	}
}
