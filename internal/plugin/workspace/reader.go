package workspace

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Reader is what the plugin's commands read from and ask of the
// workspace. The clients of a REST config implement it (see NewReader);
// tests use a fake (see package workspacetest).
type Reader interface {
	// ListMeta lists the metadata of the objects of gvr in namespace (all
	// namespaces, or the cluster scope, if empty).
	ListMeta(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)
	// List lists the objects of gvr in namespace (all if empty).
	List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error)
	// GetMeta reads the metadata of one object.
	GetMeta(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error)
	// DryRunDelete sends a DELETE of one object with dryRun=All.
	DryRunDelete(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) error
	// Events lists the core Events in namespace (all if empty) selected
	// by the field selector.
	Events(ctx context.Context, namespace, fieldSelector string) ([]corev1.Event, error)
}

// clientReader is the Reader of a REST config.
type clientReader struct {
	meta metadata.Interface
	dyn  dynamic.Interface
	core corev1client.CoreV1Interface
}

// NewReader returns the Reader of a REST config: metadata, dynamic and
// core clients.
func NewReader(cfg *rest.Config) (Reader, error) {
	m, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create a metadata client: %w", err)
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create a dynamic client: %w", err)
	}
	c, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create a client: %w", err)
	}
	return &clientReader{meta: m, dyn: d, core: c}, nil
}

func (c *clientReader) ListMeta(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	return c.meta.Resource(gvr).Namespace(namespace).List(ctx, opts)
}

func (c *clientReader) List(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	return c.dyn.Resource(gvr).Namespace(namespace).List(ctx, opts)
}

func (c *clientReader) GetMeta(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	return c.meta.Resource(gvr).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (c *clientReader) DryRunDelete(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) error {
	return c.dyn.Resource(gvr).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
}

func (c *clientReader) Events(ctx context.Context, namespace, fieldSelector string) ([]corev1.Event, error) {
	list, err := c.core.Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fieldSelector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// Warnings collects the warnings of the server's responses (an admission
// warning of a dry run, for instance). It is a rest.WarningHandlerWithContext.
type Warnings struct {
	lock sync.Mutex
	list []string
}

// HandleWarningHeaderWithContext records the text of a warning.
func (w *Warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.list = append(w.list, text)
}

// All returns the warnings received so far (none for a nil Warnings).
func (w *Warnings) All() []string {
	if w == nil {
		return nil
	}
	w.lock.Lock()
	defer w.lock.Unlock()
	return append([]string(nil), w.list...)
}
