package references

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/records"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
	"github.com/opendefensecloud/dependency-controller/internal/webhook"
)

var (
	vpcs = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}
	vms  = schema.GroupVersionResource{Group: "compute.io", Version: "v1", Resource: "virtualmachines"}
)

// provider is the provider workspace whose webhook configuration the tests'
// requests come through.
const (
	provider = logicalcluster.Name("provider")
	consumer = logicalcluster.Name("consumer")
)

type loaded bool

func (l loaded) Loaded() bool { return bool(l) }

// targetSource is the VPCs of the network provider, as the guard reads them.
var targetSource = index.Source{Export: kcp.ObjectKey{Cluster: "c-net", Name: "network.io"}, Resource: vpcs}

// staticGuards are the rules whose dependent the provider workspace serves.
type staticGuards map[schema.GroupResource][]registry.Guard

func (s staticGuards) FindGuards(t registry.Target) []registry.Guard {
	if t.Cluster != provider {
		return nil
	}
	return s[t.Resource]
}

// vmGuard is a rule of the provider workspace: VirtualMachines reference
// VPCs at each of paths.
func vmGuard(target index.Source, paths ...string) registry.Guard {
	g := registry.Guard{Rule: kcp.ObjectKey{Cluster: provider, Name: "vm-rule"}, Dependent: index.Source{Export: kcp.ObjectKey{Cluster: provider, Name: "compute.io"}, Resource: vms}}
	for _, p := range paths {
		g.References = append(g.References, registry.GuardReference{Path: fieldpathtest.MustParse(p), Target: target})
	}
	return g
}

// parentsGuard is a rule of the provider workspace: VirtualMachines
// reference VPCs in a list of {name, namespace, kind} whose kind defaults
// to VPC.
func parentsGuard(target index.Source) registry.Guard {
	g := vmGuard(target)
	g.References = append(g.References, registry.GuardReference{Target: target, Path: fieldpathtest.MustParseReference(fieldpath.ReferenceSpec{
		Path: ".spec.parents[*].name", NamespacePath: "namespace", KindPath: "kind", Kind: "VPC"})})
	return g
}

// fakeTargets holds the objects the guard can read, by
// "cluster|namespace/name"; a namespace of "*" lists across namespaces.
// Lookups may come concurrently; calls records them, sorted (see Calls).
type fakeTargets struct {
	lock    sync.Mutex
	objects map[string]kcp.Meta
	states  map[index.Source]index.State
	err     error
	// failing fails the lookups of these names with err; all fail if nil.
	failing map[string]bool
	// delay is how long each lookup takes (or until its context ends).
	delay time.Duration
	calls []string
	// elsewhere are the workspaces on shards the webhook does not read.
	elsewhere map[logicalcluster.Name]bool
}

func (f *fakeTargets) Serves(_ context.Context, _ index.Source, cluster logicalcluster.Name) error {
	if f.elsewhere[cluster] {
		return fmt.Errorf("logical cluster %s is %w, shard-1", cluster, index.ErrNotServed)
	}
	return nil
}

func (f *fakeTargets) State(src index.Source) index.State {
	if s, ok := f.states[src]; ok {
		return s
	}
	return index.State{Phase: index.PhaseSynced, Namespaced: true}
}

// Calls returns the lookups made, sorted.
func (f *fakeTargets) Calls() []string {
	f.lock.Lock()
	defer f.lock.Unlock()
	return slices.Sorted(slices.Values(f.calls))
}

// ListTargets lists the objects of namespace (every namespace of the
// cluster's if "*"), recording the call as "<cluster> <resource> list
// <namespace>"; it fails as Lookup does for every name in failing (or at
// all, without failing), and takes delay.
func (f *fakeTargets) ListTargets(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace string, most int, visit func(raw []byte) error) (bool, error) {
	if f.delay > 0 {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(f.delay):
		}
	}
	f.lock.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s list %s", cluster, src.Resource.Resource, namespace))
	var items [][]byte
	for key, o := range f.objects {
		c, nsName, _ := strings.Cut(key, "|")
		ns, _, _ := strings.Cut(nsName, "/")
		if c != cluster.String() || ns != namespace {
			continue
		}
		if f.err != nil && (f.failing == nil || f.failing[o.Name]) {
			f.lock.Unlock()
			return false, f.err
		}
		raw, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"name": o.Name, "namespace": o.Namespace, "resourceVersion": "1", "annotations": map[string]any{logicalcluster.AnnotationKey: cluster.String()},
			"deletionTimestamp": map[bool]any{true: "2026-01-01T00:00:00Z", false: nil}[o.Terminating],
		}})
		if err != nil {
			f.lock.Unlock()
			return false, err
		}
		items = append(items, raw)
	}
	f.lock.Unlock()
	slices.SortFunc(items, bytes.Compare)
	for i, raw := range items {
		if i > most {
			return false, nil
		}
		if err := visit(raw); err != nil {
			return false, err
		}
	}
	return true, nil
}

func (f *fakeTargets) Lookup(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string) ([]kcp.Meta, error) {
	if f.delay > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(f.delay):
		}
	}
	f.lock.Lock()
	defer f.lock.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("%s %s %s/%s", cluster, src.Resource.Resource, namespace, name))
	if f.err != nil && (f.failing == nil || f.failing[name]) {
		return nil, f.err
	}
	var out []kcp.Meta
	for key, o := range f.objects {
		c, nsName, _ := strings.Cut(key, "|")
		ns, n, _ := strings.Cut(nsName, "/")
		if c == cluster.String() && n == name && (ns == namespace || namespace == "" && f.State(src).Namespaced) {
			out = append(out, o)
		}
	}
	return out, nil
}

// writeRequest is a CREATE (old == nil) or UPDATE of a VirtualMachine in the
// consumer workspace.
func writeRequest(namespace, name string, spec, oldSpec map[string]any, terminating bool) admission.Request {
	raw := func(spec map[string]any) []byte {
		meta := map[string]any{"name": name, "annotations": map[string]any{logicalcluster.AnnotationKey: consumer.String()}}
		if namespace != "" {
			meta["namespace"] = namespace
		}
		if terminating {
			meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
		}
		b, _ := json.Marshal(map[string]any{"apiVersion": "compute.io/v1", "kind": "VirtualMachine", "metadata": meta, "spec": spec})
		return b
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "req-1",
		Operation: admissionv1.Create,
		Kind:      metav1.GroupVersionKind{Group: "compute.io", Version: "v1", Kind: "VirtualMachine"},
		Resource:  metav1.GroupVersionResource{Group: vms.Group, Version: vms.Version, Resource: vms.Resource},
		Name:      name, Namespace: namespace,
		Object: runtime.RawExtension{Raw: raw(spec)},
	}}
	if oldSpec != nil {
		req.Operation = admissionv1.Update
		req.OldObject = runtime.RawExtension{Raw: raw(oldSpec)}
	}
	return req
}

func vpcRef(name string) map[string]any {
	return map[string]any{"vpcRef": map[string]any{"name": name}}
}

func TestReferenceValidator(t *testing.T) {
	deletingVPC := map[string]kcp.Meta{"consumer|default/vpc-old": {Namespace: "default", Name: "vpc-old", Terminating: true}, "consumer|default/vpc-a": {Namespace: "default", Name: "vpc-a"}}
	guards := staticGuards{vms.GroupResource(): {vmGuard(targetSource, ".spec.vpcRef.name", ".spec.nics[*].vpc")}}
	tests := []struct {
		name        string
		req         admission.Request
		guards      staticGuards
		targets     *fakeTargets
		notLoaded   bool
		wantAllowed bool
		wantCode    int32
		wantMessage string
		// wantCalls are the lookups made; nil means none.
		wantCalls []string
		// wantWarnings are the admission warnings of an allowed request.
		wantWarnings []string
	}{
		{
			name:        "a new reference to an object that is being deleted is refused, naming it",
			req:         writeRequest("default", "vm-1", vpcRef("vpc-old"), nil, false),
			targets:     &fakeTargets{objects: deletingVPC},
			wantMessage: `VirtualMachine "vm-1" cannot reference vpcs "vpc-old": it is being deleted`,
			wantCalls:   []string{"consumer vpcs default/vpc-old"},
		},
		{
			name: "a new reference to an object whose deletion is deferred is refused, saying how to cancel",
			req:  writeRequest("default", "vm-1", vpcRef("vpc-going"), nil, false),
			targets: &fakeTargets{objects: map[string]kcp.Meta{
				"consumer|default/vpc-going": {Namespace: "default", Name: "vpc-going", DeletionRequested: true, DeletionRecord: "valid"},
			}},
			wantMessage: `VirtualMachine "vm-1" cannot reference vpcs "vpc-going": its deletion is deferred until nothing references it (remove its label deletion.dependencies.opendefense.cloud/requested to cancel)`,
			wantCalls:   []string{"consumer vpcs default/vpc-going"},
		},
		{
			name:        "a reference to an object that exists is allowed",
			req:         writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false),
			targets:     &fakeTargets{objects: deletingVPC},
			wantAllowed: true,
			wantCalls:   []string{"consumer vpcs default/vpc-a"},
		},
		{
			name:         "a reference to an object that does not exist (yet) is allowed, with a warning naming it",
			req:          writeRequest("default", "vm-1", vpcRef("vpc-later"), nil, false),
			targets:      &fakeTargets{objects: deletingVPC},
			wantAllowed:  true,
			wantCalls:    []string{"consumer vpcs default/vpc-later"},
			wantWarnings: []string{`VirtualMachine "vm-1" references vpcs "vpc-later", which does not exist; the reference is allowed, and reported as dangling if it does not exist within 5m0s`},
		},
		{
			name:         "an update that adds a reference to a missing object is warned about that one only",
			req:          writeRequest("default", "vm-1", map[string]any{"nics": []any{map[string]any{"vpc": "vpc-gone"}, map[string]any{"vpc": "vpc-new"}}}, map[string]any{"nics": []any{map[string]any{"vpc": "vpc-gone"}}}, false),
			targets:      &fakeTargets{objects: deletingVPC},
			wantAllowed:  true,
			wantCalls:    []string{"consumer vpcs default/vpc-new"},
			wantWarnings: []string{`VirtualMachine "vm-1" references vpcs "vpc-new", which does not exist; the reference is allowed, and reported as dangling if it does not exist within 5m0s`},
		},
		{
			name:        "an update that keeps the reference is allowed without reading",
			req:         writeRequest("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-old"}, "cpu": 8}, vpcRef("vpc-old"), false),
			targets:     &fakeTargets{objects: deletingVPC},
			wantAllowed: true,
		},
		{
			name:        "an update that adds a reference in a list is checked for the added name only",
			req:         writeRequest("default", "vm-1", map[string]any{"nics": []any{map[string]any{"vpc": "vpc-a"}, map[string]any{"vpc": "vpc-old"}}}, map[string]any{"nics": []any{map[string]any{"vpc": "vpc-a"}}}, false),
			targets:     &fakeTargets{objects: deletingVPC},
			wantMessage: `VirtualMachine "vm-1" cannot reference vpcs "vpc-old"`,
			wantCalls:   []string{"consumer vpcs default/vpc-old"},
		},
		{
			name:        "the same name at two paths is read once",
			req:         writeRequest("default", "vm-1", map[string]any{"vpcRef": map[string]any{"name": "vpc-a"}, "nics": []any{map[string]any{"vpc": "vpc-a"}}}, nil, false),
			targets:     &fakeTargets{objects: deletingVPC},
			wantAllowed: true,
			wantCalls:   []string{"consumer vpcs default/vpc-a"},
		},
		{
			name: "an UPDATE whose object names another workspace reads the targets in the old object's",
			req: func() admission.Request {
				r := writeRequest("default", "vm-1", vpcRef("vpc-old"), vpcRef("vpc-a"), false)
				r.Object.Raw = []byte(strings.Replace(string(r.Object.Raw), `"kcp.io/cluster":"consumer"`, `"kcp.io/cluster":"victim"`, 1))
				return r
			}(),
			targets:     &fakeTargets{objects: deletingVPC},
			wantMessage: `VirtualMachine "vm-1" cannot reference vpcs "vpc-old": it is being deleted`,
			wantCalls:   []string{"consumer vpcs default/vpc-old"},
		},
		{
			name:        "a dependent that is being deleted is never refused",
			req:         writeRequest("default", "vm-1", vpcRef("vpc-old"), vpcRef("vpc-a"), true),
			targets:     &fakeTargets{objects: deletingVPC},
			wantAllowed: true,
		},
		{
			name:        "a dependent without references is allowed without reading",
			req:         writeRequest("default", "vm-1", map[string]any{"cpu": 2}, nil, false),
			targets:     &fakeTargets{objects: deletingVPC},
			wantAllowed: true,
		},
		{
			name: "a cluster-scoped target is read cluster-wide",
			req:  writeRequest("default", "vm-1", vpcRef("global"), nil, false),
			targets: &fakeTargets{objects: map[string]kcp.Meta{"consumer|/global": {Name: "global", Terminating: true}},
				states: map[index.Source]index.State{targetSource: {Phase: index.PhaseSynced, Namespaced: false}}},
			wantMessage: `cannot reference vpcs "global"`,
			wantCalls:   []string{"consumer vpcs /global"},
		},
		{
			name:        "a cluster-scoped dependent looks for a namespaced target in every namespace",
			req:         writeRequest("", "vm-1", vpcRef("vpc-old"), nil, false),
			targets:     &fakeTargets{objects: deletingVPC},
			wantMessage: `cannot reference vpcs "vpc-old"`,
			wantCalls:   []string{"consumer vpcs /vpc-old"},
		},
		{
			name: "a reference naming a namespace reads the target there, and the refusal names it",
			req: writeRequest("apps", "vm-1", map[string]any{"parents": []any{
				map[string]any{"name": "vpc-old", "namespace": "default"}, map[string]any{"name": "vpc-a"}, map[string]any{"name": "vpc-x", "kind": "Router"},
			}}, nil, false),
			guards:      staticGuards{vms.GroupResource(): {parentsGuard(targetSource)}},
			targets:     &fakeTargets{objects: deletingVPC},
			wantMessage: `VirtualMachine "vm-1" cannot reference vpcs "vpc-old" in namespace "default": it is being deleted`,
			wantCalls:   []string{"consumer vpcs default/vpc-old", "consumer vpcs apps/vpc-a"},
		},
		{
			name: "a reference that moves to another namespace is a new one; naming the own namespace is none",
			req: writeRequest("default", "vm-1", map[string]any{"parents": []any{map[string]any{"name": "vpc-a", "namespace": "default"}, map[string]any{"name": "vpc-old", "namespace": "other"}}},
				map[string]any{"parents": []any{map[string]any{"name": "vpc-a"}, map[string]any{"name": "vpc-old"}}}, false),
			guards:       staticGuards{vms.GroupResource(): {parentsGuard(targetSource)}},
			targets:      &fakeTargets{objects: deletingVPC},
			wantAllowed:  true,
			wantCalls:    []string{"consumer vpcs other/vpc-old"},
			wantWarnings: []string{`VirtualMachine "vm-1" references vpcs "vpc-old" in namespace "other", which does not exist; the reference is allowed, and reported as dangling if it does not exist within 5m0s`},
		},
		{
			name:        "a webhook that reads only some shards refuses a new reference in a workspace on another one",
			req:         writeRequest("default", "vm-1", vpcRef("vpc-old"), nil, false),
			targets:     &fakeTargets{objects: deletingVPC, elsewhere: map[logicalcluster.Name]bool{consumer: true}},
			wantCode:    http.StatusMisdirectedRequest,
			wantMessage: "kcp must call the webhook of the shard that serves it",
		},
		{
			name:        "a target whose provider has not granted access is not checked",
			req:         writeRequest("default", "vm-1", vpcRef("vpc-old"), nil, false),
			targets:     &fakeTargets{objects: deletingVPC, states: map[index.Source]index.State{targetSource: {Phase: index.PhaseAccessDenied}}},
			wantAllowed: true,
		},
		{
			name:        "a reference whose protected workspace does not bind the export yet is not checked",
			req:         writeRequest("default", "vm-1", vpcRef("vpc-old"), nil, false),
			guards:      staticGuards{vms.GroupResource(): {vmGuard(index.Source{}, ".spec.vpcRef.name")}},
			targets:     &fakeTargets{objects: deletingVPC},
			wantAllowed: true,
		},
		{
			name: "a type no rule names as dependent is allowed",
			req: func() admission.Request {
				r := writeRequest("default", "db", vpcRef("vpc-old"), nil, false)
				r.Resource.Resource = "databases"
				return r
			}(),
			targets:     &fakeTargets{objects: deletingVPC},
			wantAllowed: true,
		},
		{
			name:        "a read that fails for good is a denial with a retry message (fail closed)",
			req:         writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false),
			targets:     &fakeTargets{err: apierrors.NewForbidden(vpcs.GroupResource(), "", errors.New("no"))},
			wantCode:    http.StatusServiceUnavailable,
			wantMessage: `could not check whether VirtualMachine "vm-1" may reference vpcs "vpc-a"`,
			wantCalls:   []string{"consumer vpcs default/vpc-a"},
		},
		{
			name:        "a record that does not verify refuses nothing",
			req:         writeRequest("default", "vm-1", vpcRef("vpc-forged"), nil, false),
			targets:     &fakeTargets{objects: map[string]kcp.Meta{"consumer|default/vpc-forged": {Name: "vpc-forged", Namespace: "default", DeletionRequested: true, DeletionRecord: "forged"}}},
			wantAllowed: true,
			wantCalls:   []string{"consumer vpcs default/vpc-forged"},
		},
		{
			name:        "before the rules are loaded, writes of dependents are refused with a retry message",
			req:         writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false),
			targets:     &fakeTargets{},
			notLoaded:   true,
			wantCode:    http.StatusServiceUnavailable,
			wantMessage: "retry",
		},
		{
			name: "an object without the kcp.io/cluster annotation is a bad request",
			req: func() admission.Request {
				r := writeRequest("default", "vm-1", vpcRef("vpc-a"), nil, false)
				r.Object.Raw = []byte(`{"metadata":{"name":"vm-1"}}`)
				return r
			}(),
			targets:     &fakeTargets{},
			wantCode:    http.StatusBadRequest,
			wantMessage: "kcp.io/cluster",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tt.guards
			if g == nil {
				g = guards
			}
			v := NewReferenceValidator(g, loaded(!tt.notLoaded), tt.targets, recordsVerifier{}, 0, nil, WithGracePeriod(5*time.Minute))
			resp := v.Handle(webhook.WithProvider(context.Background(), provider), tt.req)
			if resp.Allowed != tt.wantAllowed {
				t.Fatalf("Allowed = %v, want %v (%+v)", resp.Allowed, tt.wantAllowed, resp.Result)
			}
			if !tt.wantAllowed {
				if tt.wantCode != 0 && resp.Result.Code != tt.wantCode {
					t.Errorf("code = %d, want %d", resp.Result.Code, tt.wantCode)
				}
				if !strings.Contains(resp.Result.Message, tt.wantMessage) {
					t.Errorf("message = %q, want it to contain %q", resp.Result.Message, tt.wantMessage)
				}
			}
			if fmt.Sprint(resp.Warnings) != fmt.Sprint(tt.wantWarnings) {
				t.Errorf("warnings = %q, want %q", resp.Warnings, tt.wantWarnings)
			}
			if got, want := tt.targets.Calls(), slices.Sorted(slices.Values(tt.wantCalls)); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("lookups = %q, want %q", got, want)
			}
		})
	}
}

// recordsVerifier verifies the records whose annotation is "valid".
type recordsVerifier struct{}

func (recordsVerifier) Verify(_ schema.GroupResource, obj kcp.Meta) error {
	if obj.DeletionRequested && obj.DeletionRecord == "valid" {
		return nil
	}
	return &records.Error{Problem: records.ProblemBadSignature}
}
