package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

// stack is a workspace with VPC vpc-a <- Subnet subnet-a <- VM vm-1 in
// default, and vpc-free, which nothing references.
func stack() *fakeReader {
	vpcA, subnetA := reflabels.Key(vpcsGVR.GroupResource(), "vpc-a"), reflabels.Key(subnetsGVR.GroupResource(), "subnet-a")
	return &fakeReader{objects: map[schema.GroupVersionResource][]*unstructured.Unstructured{
		vpcsGVR:    {obj(vpcsGVR, "default", "vpc-a", nil, nil), obj(vpcsGVR, "default", "vpc-free", nil, nil)},
		subnetsGVR: {obj(subnetsGVR, "default", "subnet-a", labelled(vpcA), nil)},
		vmsGVR:     {obj(vmsGVR, "default", "vm-1", labelled(subnetA, vpcA), nil)},
	}}
}

// runWith runs the plugin with args against r and returns its exit code,
// stdout and stderr.
func runWith(t *testing.T, r *fakeReader, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	code := run(context.Background(), streams, args, func(flags *genericclioptions.ConfigFlags) (*env, error) {
		ns := "default"
		if *flags.Namespace != "" {
			ns = *flags.Namespace
		}
		return &env{
			mapper: testMapper(), reader: r, namespace: ns, explicit: *flags.Namespace != "", warnings: &warnings{},
			types: func() ([]apiType, error) { return testTypes, nil },
		}, nil
	})
	return code, out.String(), errOut.String()
}

func TestExitCodesAndOutputs(t *testing.T) {
	blocked := stack()
	blocked.deleteErr = denied(403, "is still referenced by VirtualMachine/default/vm-1; delete these", blockerCauses(1, vm1))
	deferred := stack()
	deferred.deleteErr = denied(403, "is still referenced by VirtualMachine/default/vm-1; delete these; its deletion would be deferred until its dependent is gone", blockerCauses(1, vm1))
	gone := stack()
	gone.deleteErr = apierrors.NewNotFound(vpcsGVR.GroupResource(), "vpc-x")
	cycle := stack()
	cycle.objects[vpcsGVR][0].SetLabels(labelled(reflabels.Key(vmsGVR.GroupResource(), "vm-1")))

	for _, tc := range []struct {
		name   string
		reader *fakeReader
		args   []string
		code   int
		out    []string
		errOut string
	}{
		{name: "why: allowed", reader: stack(), args: []string{"why", "vpc/vpc-free"}, code: 0, out: []string{"ALLOWED: "}},
		{name: "why: blocked", reader: blocked, args: []string{"why", "vpc", "vpc-a"}, code: 1, out: []string{"BLOCKED: ", "vm-1"}},
		{name: "why: would be deferred, as JSON", reader: deferred, args: []string{"why", "vpc/vpc-a", "-o", "json"}, code: 1, out: []string{`"verdict": "WouldBeDeferred"`, `"total": 1`}},
		{name: "why: not found", reader: gone, args: []string{"why", "vpc/vpc-x"}, code: 2, errOut: `error: failed to ask whether vpcs.network.test.io "vpc-x" in namespace "default" can be deleted: vpcs.network.test.io "vpc-x" not found`},
		{name: "why: no object", reader: stack(), args: []string{"why", "vpc"}, code: 2, errOut: "error: expected TYPE/NAME, got \"vpc\"\nSee 'kubectl dependencies why -h' for help and examples.\n"},
		{name: "why: unknown type", reader: stack(), args: []string{"why", "gateway/g"}, code: 2, errOut: `error: the server doesn't have a resource type "gateway"`},
		{name: "why: unknown output", reader: stack(), args: []string{"why", "vpc/vpc-a", "-o", "wide"}, code: 2, errOut: `output format "wide"`},
		{name: "unknown flag", reader: stack(), args: []string{"refs", "--bogus"}, code: 2, errOut: "error: unknown flag: --bogus\nSee 'kubectl dependencies refs -h'"},
		{name: "unknown command", reader: stack(), args: []string{"bogus"}, code: 2, errOut: `unknown command "bogus"`},
		{name: "refs: referenced", reader: stack(), args: []string{"refs", "vpc/vpc-a"}, code: 1, out: []string{"Subnet           default     subnet-a\nVirtualMachine   default     vm-1\n"}},
		{name: "refs: free", reader: stack(), args: []string{"refs", "vpc/vpc-free", "-o", "yaml"}, code: 0, out: []string{"referencedBy: []\n"}},
		{name: "refs: in another namespace", reader: stack(), args: []string{"refs", "vpc/vpc-a", "-n", "team-b"}, code: 0, out: []string{`No object references vpcs.network.test.io "vpc-a" in namespace "team-b"`}},
		{name: "order: types", reader: stack(), args: []string{"order", "vpcs,subnets", "virtualmachine"}, code: 0, out: []string{"1      VirtualMachine   default     vm-1\n2      Subnet           default     subnet-a\n3      VPC              default     vpc-a\n"}},
		{name: "order: a cycle", reader: cycle, args: []string{"order", "vpcs,subnets,virtualmachines"}, code: 1, out: []string{"Cycle 1 (wave 1): "}},
		{name: "order: an object", reader: stack(), args: []string{"order", "vpc/vpc-a"}, code: 2, errOut: "order takes types"},
		{name: "order: types and files", reader: stack(), args: []string{"order", "vpcs", "-f", "x.yaml"}, code: 2, errOut: "not both"},
		{name: "dangling: none", reader: stack(), args: []string{"dangling", "-A"}, code: 0, out: []string{"No dangling references reported.\n"}},
		{name: "dangling: no arguments", reader: stack(), args: []string{"dangling", "x"}, code: 2, errOut: `unknown command "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runWith(t, tc.reader, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.out {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			if !strings.Contains(errOut, tc.errOut) || (tc.errOut == "" && errOut != "") {
				t.Errorf("stderr %q, want %q", errOut, tc.errOut)
			}
		})
	}
}

func TestOrderOutputs(t *testing.T) {
	code, out, _ := runWith(t, stack(), "order", "vpcs,subnets,virtualmachines", "-o", "json")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	var r OrderResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	want := []Wave{
		// vpc-free: nothing references it, so it goes first.
		{Wave: 1, Objects: []WaveObject{
			{Object: Object{Kind: "VPC", Resource: "vpcs.network.test.io", Namespace: "default", Name: "vpc-free"}},
			{Object: Object{Kind: "VirtualMachine", Resource: "virtualmachines.compute.test.io", Namespace: "default", Name: "vm-1"}},
		}},
		{Wave: 2, Objects: []WaveObject{{Object: Object{Kind: "Subnet", Resource: "subnets.network.test.io", Namespace: "default", Name: "subnet-a"}}}},
		{Wave: 3, Objects: []WaveObject{{Object: Object{Kind: "VPC", Resource: "vpcs.network.test.io", Namespace: "default", Name: "vpc-a"}}}},
	}
	if !reflect.DeepEqual(r.Waves, want) {
		t.Errorf("waves = %+v", r.Waves)
	}
	if !strings.Contains(out, `"resource": "vpcs.network.test.io",`) {
		t.Errorf("the objects are not inlined:\n%s", out)
	}
	code, out, _ = runWith(t, stack(), "order", "vpcs", "-o", "yaml")
	if err := yaml.Unmarshal([]byte(out), &r); code != 0 || err != nil || len(r.Waves) != 1 {
		t.Errorf("yaml: %d, %v\n%s", code, err, out)
	}
}

func TestOrderFromFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("network.yaml", `apiVersion: network.test.io/v1
kind: VPC
metadata:
  name: vpc-a
spec: {cidr: 10.0.0.0/16}
---
apiVersion: network.test.io/v1
kind: Subnet
metadata:
  name: subnet-a
  namespace: default
---
apiVersion: network.test.io/v1
kind: VPC
metadata:
  name: vpc-never-created
`)
	write("compute/vms.json", `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "compute.test.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm-1"}}
]}`)
	other := write("other/vpc.yaml", "apiVersion: network.test.io/v1\nkind: VPC\nmetadata:\n  name: vpc-a\n  namespace: team-b\n")

	r := stack()
	code, out, errOut := runWith(t, r, "order", "-f", filepath.Join(dir, "network.yaml"), "-f", filepath.Join(dir, "compute"))
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, errOut)
	}
	for _, w := range []string{
		"1      VirtualMachine   default     vm-1\n2      Subnet           default     subnet-a\n3      VPC              default     vpc-a\n",
		"1 object of the manifests does not exist: VPC/default/vpc-never-created.",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	// One list per type and namespace.
	if reqs := r.requestsMatching("list vpcs"); len(reqs) != 1 {
		t.Errorf("lists of VPCs: %q", reqs)
	}

	code, out, _ = runWith(t, stack(), "order", "-f", dir, "-R", "-o", "json")
	if code != 0 || !strings.Contains(out, `"namespace": "team-b"`) {
		t.Errorf("-R: exit code %d\n%s", code, out)
	}
	code, _, errOut = runWith(t, stack(), "order", "-f", other, "-n", "default")
	if code != 2 || !strings.Contains(errOut, `does not match the namespace "default" (-n)`) {
		t.Errorf("a manifest of another namespace with -n: exit code %d: %s", code, errOut)
	}
	code, _, errOut = runWith(t, stack(), "order", "-f", filepath.Join(dir, "missing.yaml"))
	if code != 2 || !strings.Contains(errOut, "failed to read the manifests") {
		t.Errorf("a missing file: exit code %d: %s", code, errOut)
	}
}

func TestDependentTypes(t *testing.T) {
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"get", "list"}},
			{Name: "secrets", Kind: "Secret", Namespaced: true, Verbs: []string{"get", "list"}},
			{Name: "namespaces/status", Kind: "Namespace", Verbs: []string{"get"}},
		}},
		{GroupVersion: "authorization.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "subjectaccessreviews", Kind: "SubjectAccessReview", Verbs: []string{"create"}}}},
		{GroupVersion: "apis.kcp.io/v1alpha2", APIResources: []metav1.APIResource{{Name: "apibindings", Kind: "APIBinding", Verbs: []string{"get", "list"}}}},
		{GroupVersion: "tenancy.kcp.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "workspaces", Kind: "Workspace", Verbs: []string{"get", "list"}}}},
		{GroupVersion: "network.test.io/v1", APIResources: []metav1.APIResource{{Name: "vpcs", Kind: "VPC", Namespaced: true, Verbs: []string{"get", "list"}}}},
		{GroupVersion: "compute.test.io/v1", APIResources: []metav1.APIResource{{Name: "virtualmachines", Kind: "VirtualMachine", Namespaced: true, Verbs: []string{"list"}}}},
		{GroupVersion: "local.example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: []string{"list"}}}},
	}
	types := typesOf(lists)
	names := func(ts []apiType) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.GVR.GroupResource().String())
		}
		return out
	}
	all := []string{"configmaps", "secrets", "apibindings.apis.kcp.io", "virtualmachines.compute.test.io", "widgets.local.example.com", "vpcs.network.test.io", "workspaces.tenancy.kcp.io"}
	if got := names(types); !reflect.DeepEqual(got, all) {
		t.Fatalf("typesOf = %q", got)
	}
	binding := func(name string, bound ...schema.GroupResource) *unstructured.Unstructured {
		var resources []any
		for _, gr := range bound {
			resources = append(resources, map[string]any{"group": gr.Group, "resource": gr.Resource})
		}
		u := obj(apiBindings, "", name, nil, nil)
		u.Object["status"] = map[string]any{"boundResources": resources}
		return u
	}
	r := &fakeReader{objects: map[schema.GroupVersionResource][]*unstructured.Unstructured{apiBindings: {
		binding("compute", schema.GroupResource{Group: "compute.test.io", Resource: "virtualmachines"}),
		binding("network", schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}),
		binding("tenancy", schema.GroupResource{Group: "tenancy.kcp.io", Resource: "workspaces"}),
		binding("configmaps", schema.GroupResource{Resource: "configmaps"}),
	}}}
	want := []string{"configmaps", "virtualmachines.compute.test.io", "widgets.local.example.com", "vpcs.network.test.io", "workspaces.tenancy.kcp.io"}
	if got := names(dependentTypes(context.Background(), r, types)); !reflect.DeepEqual(got, want) {
		t.Errorf("dependentTypes = %q, want %q (the bound ones and those outside kcp's native groups)", got, want)
	}
	r.listErr = map[string]error{"apibindings": apierrors.NewForbidden(apiBindings.GroupResource(), "", nil)}
	if got := names(dependentTypes(context.Background(), r, types)); !reflect.DeepEqual(got, all) {
		t.Errorf("without access to APIBindings: %q, want every type", got)
	}
	noKCP := slicesWithout(types, "apibindings")
	if got := names(dependentTypes(context.Background(), &fakeReader{}, noKCP)); len(got) != len(all)-1 {
		t.Errorf("without APIBindings: %q, want every type", got)
	}
}

func slicesWithout(types []apiType, resource string) []apiType {
	var out []apiType
	for _, t := range types {
		if t.GVR.Resource != resource {
			out = append(out, t)
		}
	}
	return out
}
