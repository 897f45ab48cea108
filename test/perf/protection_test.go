//go:build perf

package perf

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
	"github.com/opendefensecloud/dependency-controller/test/procenv"
)

// protection is a set of rules; the controller installs the webhook
// configurations they need.
type protection struct {
	// rules carry the kcp.io/cluster annotation of the workspace they live
	// in, as they do on the server; it is removed when they are created.
	rules []*depv1alpha1.DependencyRule
}

// rule returns a rule in the workspace of the dependent's provider: the
// dependent references target by name at path.
func (s *setup) rule(name string, dependent, target schema.GroupVersionResource, path string, policy depv1alpha1.DeletionPolicy) *depv1alpha1.DependencyRule {
	return s.env.Rule(name, dependent, target, path, policy)
}

// protect replaces the active protection with p (nil: no rules) and, for a
// new p, waits until each of its rules protects a referenced object.
func (s *setup) protect(ctx context.Context, t *testing.T, p *protection) {
	t.Helper()
	if s.active == p {
		return
	}
	if old := s.active; old != nil {
		for _, r := range old.rules {
			must(t, client.IgnoreNotFound(s.cli.Cluster(logicalcluster.From(r).Path()).Delete(ctx, serverCopy(r))))
		}
		// Gone once the webhook has removed its marks (its finalizer), and
		// then the controller removes the configurations.
		must(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			for _, r := range old.rules {
				err := s.cli.Cluster(logicalcluster.From(r).Path()).Get(ctx, client.ObjectKeyFromObject(serverCopy(r)), &depv1alpha1.DependencyRule{})
				if !apierrors.IsNotFound(err) {
					return false, nil
				}
			}
			for _, ws := range []logicalcluster.Path{s.network, s.compute} {
				err := s.cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
				if !apierrors.IsNotFound(err) {
					return false, nil
				}
			}
			return true, nil
		}))
		time.Sleep(2 * time.Second) // kcp's admission picks up the removed configurations
	}
	s.active = p
	if p == nil {
		return
	}
	for _, r := range p.rules {
		must(t, s.cli.Cluster(logicalcluster.From(r).Path()).Create(ctx, serverCopy(r)))
	}
	// Protection is on once, for every rule, a referenced target cannot be
	// deleted (a dry run, which records nothing under Replay).
	ns := "probe-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	must(t, s.cli.Cluster(s.consumer).Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	for _, r := range p.rules {
		target, dependent, path := ruleResources(r)
		name := "probe-" + r.Name
		createObjects(t, s.dyn, target, ns, 1, func(int) (string, map[string]any) { return name, map[string]any{} })
		createObjects(t, s.dyn, dependent, ns, 1, func(int) (string, map[string]any) { return name, refSpec(path, name) })
	}
	must(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, r := range p.rules {
			target, _, _ := ruleResources(r)
			if err := s.dyn.Resource(target).Namespace(ns).Delete(ctx, "probe-"+r.Name, dryRun); !apierrors.IsForbidden(err) {
				return false, nil
			}
		}
		return true, nil
	}))
}

// dependents returns the dependent resources of the active protection.
func (s *setup) dependents() []schema.GroupVersionResource {
	if s.active == nil {
		return nil
	}
	var out []schema.GroupVersionResource
	for _, r := range s.active.rules {
		_, dependent, _ := ruleResources(r)
		if !slices.Contains(out, dependent) {
			out = append(out, dependent)
		}
	}
	return out
}

// ruleResources returns the (first) target resource of a rule, its dependent
// resource and the path at which the dependent references the target.
func ruleResources(r *depv1alpha1.DependencyRule) (target, dependent schema.GroupVersionResource, path string) {
	d, dep := r.Spec.Dependencies[0], r.Spec.Dependent
	return schema.GroupVersionResource{Group: d.Group, Version: d.Version, Resource: d.Resource},
		schema.GroupVersionResource{Group: dep.Group, Version: dep.Version, Resource: dep.Resource}, d.FieldRef.Path
}

// refSpec returns a spec that holds name at path (".spec.a.b").
func refSpec(path, name string) map[string]any {
	spec := map[string]any{}
	if err := unstructured.SetNestedField(spec, name, strings.Split(strings.TrimPrefix(path, ".spec."), ".")...); err != nil {
		panic(fmt.Sprintf("field path %s: %v", path, err)) // cannot happen: a fresh map
	}
	return spec
}

// serverCopy returns a copy of a rule to send to the server, without the
// kcp.io/cluster annotation that the server sets.
var serverCopy = procenv.ServerCopy
