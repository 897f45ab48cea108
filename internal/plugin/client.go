package plugin

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Reader is what the commands read from and ask of the workspace. The
// clients of a kubeconfig implement it (see newEnv); tests use a fake.
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

// env is what a command runs with: the kubeconfig flags resolved into a
// RESTMapper, discovery and a Reader, and the namespace.
type env struct {
	mapper meta.RESTMapper
	// types returns the types the workspace serves that can be listed
	// (see discoverTypes).
	types  func() ([]apiType, error)
	reader Reader
	// namespace is the one of -n or of the kubeconfig's context;
	// explicit tells whether -n set it.
	namespace string
	explicit  bool
	// warnings collects the warnings the server sends.
	warnings *warnings
}

// newEnv builds the clients of the kubeconfig flags.
func newEnv(flags *genericclioptions.ConfigFlags) (*env, error) {
	cfg, err := flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load the kubeconfig: %w", err)
	}
	ns, explicit, err := flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, fmt.Errorf("failed to read the namespace of the kubeconfig: %w", err)
	}
	mapper, err := flags.ToRESTMapper()
	if err != nil {
		return nil, fmt.Errorf("failed to set up discovery: %w", err)
	}
	disco, err := flags.ToDiscoveryClient()
	if err != nil {
		return nil, fmt.Errorf("failed to set up discovery: %w", err)
	}
	w := &warnings{}
	cfg = rest.CopyConfig(cfg)
	// As kubectl: the reads of refs run concurrently, one per type.
	cfg.QPS, cfg.Burst = 50, 300
	cfg.WarningHandlerWithContext = w
	r, err := newClientReader(cfg)
	if err != nil {
		return nil, err
	}
	types := func() ([]apiType, error) { return discoverTypes(disco) }
	return &env{mapper: mapper, types: types, reader: r, namespace: ns, explicit: explicit, warnings: w}, nil
}

// clientReader is the Reader of a REST config.
type clientReader struct {
	meta metadata.Interface
	dyn  dynamic.Interface
	core corev1client.CoreV1Interface
}

func newClientReader(cfg *rest.Config) (*clientReader, error) {
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

// warnings collects the warnings of the server's responses (an admission
// warning of a dry run, for instance).
type warnings struct {
	lock sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.lock.Lock()
	defer w.lock.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) all() []string {
	if w == nil {
		return nil
	}
	w.lock.Lock()
	defer w.lock.Unlock()
	return append([]string(nil), w.list...)
}
