// Package workspacetest helps the tests of package workspace and of the
// plugin's commands: a fake workspace.Reader that serves objects from
// memory, and the test types (VPCs, Subnets, VirtualMachines, Zones) with
// their RESTMapper.
package workspacetest

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

// Reader is a fake workspace.Reader: it serves objects from memory, with
// label and field selectors (metadata.namespace, metadata.name) as kcp
// applies them, and records the requests.
type Reader struct {
	// Objects are the objects of each resource.
	Objects map[schema.GroupVersionResource][]*unstructured.Unstructured
	// EventList are the core Events that Events serves.
	EventList []corev1.Event
	// DeleteErr is the answer to a dry-run DELETE.
	DeleteErr error
	// ListErr fails the lists of a resource (by its plural name).
	ListErr map[string]error

	lock     sync.Mutex
	requests []string
}

// record records a request.
func (f *Reader) record(s string) {
	f.lock.Lock()
	defer f.lock.Unlock()
	f.requests = append(f.requests, s)
}

// selected returns the objects of gvr that a list in namespace with opts
// selects, and records the request.
func (f *Reader) selected(gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) ([]*unstructured.Unstructured, error) {
	f.record("list " + gvr.Resource + " " + namespace + " " + opts.LabelSelector + " " + opts.FieldSelector)
	if err := f.ListErr[gvr.Resource]; err != nil {
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
	for _, o := range f.Objects[gvr] {
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

// partial returns the metadata of o as the metadata client reads it.
func partial(o *unstructured.Unstructured) metav1.PartialObjectMetadata {
	a, _ := meta.Accessor(o)
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: a.GetNamespace(), Name: a.GetName(), UID: a.GetUID(), Labels: a.GetLabels(), DeletionTimestamp: a.GetDeletionTimestamp(),
	}}
}

// ListMeta lists the metadata of the selected objects.
func (f *Reader) ListMeta(_ context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
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

// List lists the selected objects.
func (f *Reader) List(_ context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
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

// GetMeta reads the metadata of one object, or answers NotFound.
func (f *Reader) GetMeta(_ context.Context, gvr schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	f.record("get " + gvr.Resource + " " + namespace + " " + name)
	for _, o := range f.Objects[gvr] {
		if o.GetNamespace() == namespace && o.GetName() == name {
			p := partial(o)
			return &p, nil
		}
	}
	return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
}

// DryRunDelete answers DeleteErr.
func (f *Reader) DryRunDelete(_ context.Context, gvr schema.GroupVersionResource, namespace, name string) error {
	f.record("delete " + gvr.Resource + " " + namespace + " " + name)
	return f.DeleteErr
}

// Events lists the Events of EventList in namespace (all if empty) that
// the field selector (type, reason) selects.
func (f *Reader) Events(_ context.Context, namespace, fieldSelector string) ([]corev1.Event, error) {
	f.record("events " + namespace + " " + fieldSelector)
	fs, err := fields.ParseSelector(fieldSelector)
	if err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, ev := range f.EventList {
		if namespace != "" && ev.Namespace != namespace {
			continue
		}
		if fs.Matches(fields.Set{"type": ev.Type, "reason": ev.Reason}) {
			out = append(out, ev)
		}
	}
	return out, nil
}

// RequestsMatching returns the recorded requests that start with prefix.
func (f *Reader) RequestsMatching(prefix string) []string {
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
	// VPCs are namespaced, of kind VPC, short name vpc.
	VPCs = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "vpcs"}
	// Subnets are namespaced, of kind Subnet, short name subnet.
	Subnets = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "subnets"}
	// VirtualMachines are namespaced, of kind VirtualMachine, short name
	// virtualmachine.
	VirtualMachines = schema.GroupVersionResource{Group: "compute.test.io", Version: "v1", Resource: "virtualmachines"}
	// Zones are cluster-scoped, of kind Zone, short name zone.
	Zones = schema.GroupVersionResource{Group: "network.test.io", Version: "v1", Resource: "zones"}
)

// Mapper returns a RESTMapper of the test types.
func Mapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.AddSpecific(VPCs.GroupVersion().WithKind("VPC"), VPCs, VPCs.GroupVersion().WithResource("vpc"), meta.RESTScopeNamespace)
	m.AddSpecific(Subnets.GroupVersion().WithKind("Subnet"), Subnets, Subnets.GroupVersion().WithResource("subnet"), meta.RESTScopeNamespace)
	m.AddSpecific(VirtualMachines.GroupVersion().WithKind("VirtualMachine"), VirtualMachines, VirtualMachines.GroupVersion().WithResource("virtualmachine"), meta.RESTScopeNamespace)
	m.AddSpecific(Zones.GroupVersion().WithKind("Zone"), Zones, Zones.GroupVersion().WithResource("zone"), meta.RESTScopeRoot)
	return m
}

// NewObject returns an object of gvr with labels and a spec.
func NewObject(gvr schema.GroupVersionResource, namespace, name string, labels map[string]string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetLabels(labels)
	return u
}
