package workspace

import (
	"context"
	"reflect"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opendefensecloud/dependency-controller/internal/plugin/workspace/workspacetest"
)

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
	names := func(ts []Type) []string {
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
		u := workspacetest.NewObject(apiBindings, "", name, nil, nil)
		u.Object["status"] = map[string]any{"boundResources": resources}
		return u
	}
	r := &workspacetest.Reader{Objects: map[schema.GroupVersionResource][]*unstructured.Unstructured{apiBindings: {
		binding("compute", schema.GroupResource{Group: "compute.test.io", Resource: "virtualmachines"}),
		binding("network", schema.GroupResource{Group: "network.test.io", Resource: "vpcs"}),
		binding("tenancy", schema.GroupResource{Group: "tenancy.kcp.io", Resource: "workspaces"}),
		binding("configmaps", schema.GroupResource{Resource: "configmaps"}),
	}}}
	want := []string{"configmaps", "virtualmachines.compute.test.io", "widgets.local.example.com", "vpcs.network.test.io", "workspaces.tenancy.kcp.io"}
	if got := names(DependentTypes(context.Background(), r, types)); !reflect.DeepEqual(got, want) {
		t.Errorf("DependentTypes = %q, want %q (the bound ones and those outside kcp's native groups)", got, want)
	}
	r.ListErr = map[string]error{"apibindings": apierrors.NewForbidden(apiBindings.GroupResource(), "", nil)}
	if got := names(DependentTypes(context.Background(), r, types)); !reflect.DeepEqual(got, all) {
		t.Errorf("without access to APIBindings: %q, want every type", got)
	}
	noKCP := slicesWithout(types, "apibindings")
	if got := names(DependentTypes(context.Background(), &workspacetest.Reader{}, noKCP)); len(got) != len(all)-1 {
		t.Errorf("without APIBindings: %q, want every type", got)
	}
}

func slicesWithout(types []Type, resource string) []Type {
	var out []Type
	for _, t := range types {
		if t.GVR.Resource != resource {
			out = append(out, t)
		}
	}
	return out
}
