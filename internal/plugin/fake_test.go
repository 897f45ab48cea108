package plugin

import (
	"context"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeReader serves objects from memory, with label and field selectors
// (metadata.namespace) as kcp applies them, and records the requests.
type fakeReader struct {
	objects map[schema.GroupVersionResource][]*unstructured.Unstructured
	events  []corev1.Event
	// deleteErr is the answer to a dry-run DELETE.
	deleteErr error
	// listErr fails the lists of a resource.
	listErr map[string]error

	lock     sync.Mutex
	requests []string
}

func (f *fakeReader) record(s string) {
	f.lock.Lock()
	defer f.lock.Unlock()
	f.requests = append(f.requests, s)
}

func (f *fakeReader) selected(gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) ([]*unstructured.Unstructured, error) {
	f.record("list " + gvr.Resource + " " + namespace + " " + opts.LabelSelector + " " + opts.FieldSelector)
	if err := f.listErr[gvr.Resource]; err != nil {
		return nil, err
	}
	ls, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	fs, err := fields.ParseSelector(opts.FieldSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	var out []*unstructured.Unstructured
	for _, o := range f.objects[gvr] {
		if namespace != "" && o.GetNamespace() != namespace {
			continue
		}
		if !ls.Matches(labels.Set(o.GetLabels())) || !fs.Matches(fields.Set{"metadata.namespace": o.GetNamespace(), "metadata.name": o.GetName()}) {
			continue
		}
		out = append(out, o)
		if opts.Limit > 0 && int64(len(out)) == opts.Limit {
			break
		}
	}
	return out, nil
}

func partial(o *unstructured.Unstructured) metav1.PartialObjectMetadata {
	a, _ := meta.Accessor(o)
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: a.GetNamespace(), Name: a.GetName(), UID: a.GetUID(), Labels: a.GetLabels(), DeletionTimestamp: a.GetDeletionTimestamp(),
	}}
}

func (f *fakeReader) ListMeta(_ context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	objs, err := f.selected(gvr, namespace, opts)
	if err != nil {
		return nil, err
	}
	list := &metav1.PartialObjectMetadataList{}
	for _, o := range objs {
		list.Items = append(list.Items, partial(o))
	}
	return list, nil
}

func (f *fakeReader) List(_ context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	objs, err := f.selected(gvr, namespace, opts)
	if err != nil {
		return nil, err
	}
	list := &unstructured.UnstructuredList{}
	for _, o := range objs {
		list.Items = append(list.Items, *o.DeepCopy())
	}
	return list, nil
}

func (f *fakeReader) GetMeta(_ context.Context, gvr schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	f.record("get " + gvr.Resource + " " + namespace + " " + name)
	for _, o := range f.objects[gvr] {
		if o.GetNamespace() == namespace && o.GetName() == name {
			p := partial(o)
			return &p, nil
		}
	}
	return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
}

func (f *fakeReader) DryRunDelete(_ context.Context, gvr schema.GroupVersionResource, namespace, name string) error {
	f.record("delete " + gvr.Resource + " " + namespace + " " + name)
	return f.deleteErr
}

func (f *fakeReader) Events(_ context.Context, namespace, fieldSelector string) ([]corev1.Event, error) {
	f.record("events " + namespace + " " + fieldSelector)
	fs, err := fields.ParseSelector(fieldSelector)
	if err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, ev := range f.events {
		if namespace != "" && ev.Namespace != namespace {
			continue
		}
		if fs.Matches(fields.Set{"type": ev.Type, "reason": ev.Reason}) {
			out = append(out, ev)
		}
	}
	return out, nil
}

// requestsMatching returns the recorded requests that start with prefix.
func (f *fakeReader) requestsMatching(prefix string) []string {
	f.lock.Lock()
	defer f.lock.Unlock()
	var out []string
	for _, r := range f.requests {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// The types of the tests: VPCs (network.test.io), Subnets that reference
// VPCs, and VirtualMachines (compute.test.io) that reference both; plus
// a cluster-scoped Zone.
var (
	vpcsGVR    = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "vpcs"}
	subnetsGVR = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "subnets"}
	vmsGVR     = schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "virtualmachines"}
	zonesGVR   = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "zones"}
)

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.AddSpecific(vpcsGVR.GroupVersion().WithKind("VPC"), vpcsGVR, vpcsGVR.GroupVersion().WithResource("vpc"), meta.RESTScopeNamespace)
	m.AddSpecific(subnetsGVR.GroupVersion().WithKind("Subnet"), subnetsGVR, subnetsGVR.GroupVersion().WithResource("subnet"), meta.RESTScopeNamespace)
	m.AddSpecific(vmsGVR.GroupVersion().WithKind("VirtualMachine"), vmsGVR, vmsGVR.GroupVersion().WithResource("virtualmachine"), meta.RESTScopeNamespace)
	m.AddSpecific(zonesGVR.GroupVersion().WithKind("Zone"), zonesGVR, zonesGVR.GroupVersion().WithResource("zone"), meta.RESTScopeRoot)
	return m
}

var testTypes = []apiType{
	{GVR: vmsGVR, Kind: "VirtualMachine", Namespaced: true},
	{GVR: subnetsGVR, Kind: "Subnet", Namespaced: true},
	{GVR: vpcsGVR, Kind: "VPC", Namespaced: true},
	{GVR: zonesGVR, Kind: "Zone"},
}

// obj returns an object of gvr with labels and a spec.
func obj(gvr schema.GroupVersionResource, namespace, name string, labels map[string]string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetLabels(labels)
	return u
}
