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
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
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
// new p, waits until each of its rules protects a referenced object, kcp
// calls the labelling webhook for its dependents, and it reports
// DependentsLabelled=True (the webhook has relabelled the dependents that
// existed before it, so its relabelling does not run during a measurement,
// and allowed DELETEs read the dependents by label).
func (s *setup) protect(ctx context.Context, t *testing.T, p *protection) {
	t.Helper()
	if s.active == p {
		return
	}
	s.install(ctx, t, p)
	if p != nil {
		took := s.waitLabelled(ctx, t, p)
		t.Logf("the rules %s reported DependentsLabelled=True %s after they protected", p.names(), took.Round(100*time.Millisecond))
	}
}

// install replaces the active protection with p (nil: no rules) and, for a
// new p, waits until kcp calls the labelling webhook for the dependents of
// each of its rules and each of its rules protects a referenced object.
func (s *setup) install(ctx context.Context, t *testing.T, p *protection) {
	t.Helper()
	if s.active == p {
		return
	}
	if old := s.active; old != nil {
		for _, r := range old.rules {
			must(t, client.IgnoreNotFound(s.cli.Cluster(logicalcluster.From(r).Path()).Delete(ctx, serverCopy(r))))
		}
		// Gone at once, and then the controller removes the
		// configurations.
		must(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
			for _, r := range old.rules {
				err := s.cli.Cluster(logicalcluster.From(r).Path()).Get(ctx, client.ObjectKeyFromObject(serverCopy(r)), &depv1alpha1.DependencyRule{})
				if !apierrors.IsNotFound(err) {
					return false, nil
				}
			}
			for _, ws := range []logicalcluster.Path{s.network, s.compute} {
				for _, cfg := range []client.Object{&admissionregistrationv1.ValidatingWebhookConfiguration{}, &admissionregistrationv1.MutatingWebhookConfiguration{}} {
					if err := s.cli.Cluster(ws).Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, cfg); !apierrors.IsNotFound(err) {
						return false, nil
					}
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
	// deleted (a dry run, which records nothing under Replay). The
	// dependents are created once kcp calls the labelling webhook for them
	// (a dry-run CREATE comes back labelled under the webhook's scheme), so
	// that they need no relabelling.
	ns := "probe-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s.createNamespace(ctx, t, ns)
	for _, r := range p.rules {
		target, dependent, path := ruleResources(r)
		name := "probe-" + r.Name
		createObjects(t, s.dyn, target, ns, 1, func(int) (string, map[string]any) { return name, map[string]any{} })
		probe := newObject(dependent, ns, name, refSpec(path, name))
		var labels map[string]string
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			created, err := s.dyn.Resource(dependent).Namespace(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return false, nil
			}
			labels = created.GetLabels()
			scheme := labels[depv1alpha1.LabelReferencesScheme]
			return scheme != "" && !strings.HasPrefix(scheme, "relabel-"), nil
		}); err != nil {
			t.Fatalf("kcp does not call the labelling webhook for the %s of the rule %s (a dry-run CREATE came back with the labels %v)", dependent.Resource, r.Name, labels)
		}
		_, err := s.dyn.Resource(dependent).Namespace(ns).Create(ctx, probe, metav1.CreateOptions{})
		must(t, err)
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

// names returns the names of the rules of p.
func (p *protection) names() string {
	var names []string
	for _, r := range p.rules {
		names = append(names, r.Name)
	}
	return strings.Join(names, ", ")
}

// labelledWait bounds how long waitLabelled waits: the relabelling of
// every dependent that existed before the rules.
const labelledWait = 15 * time.Minute

// waitLabelled waits until every rule of p reports DependentsLabelled=True,
// and returns how long that took.
func (s *setup) waitLabelled(ctx context.Context, t *testing.T, p *protection) time.Duration {
	t.Helper()
	start := time.Now()
	var last *metav1.Condition
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, labelledWait, true, func(context.Context) (bool, error) {
		for _, r := range p.rules {
			if last = s.condition(ctx, t, r); last == nil || last.Status != metav1.ConditionTrue {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the rules %s do not report DependentsLabelled=True within %s: %+v", p.names(), labelledWait, last)
	}
	return time.Since(start)
}

// waitCondition waits until rule reports the DependentsLabelled condition,
// and returns it.
func (s *setup) waitCondition(ctx context.Context, t *testing.T, rule *depv1alpha1.DependencyRule) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	must(t, wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		c = s.condition(ctx, t, rule)
		return c != nil, nil
	}))
	return c
}

// condition returns the DependentsLabelled condition of rule, nil if it
// has none.
func (s *setup) condition(ctx context.Context, t *testing.T, rule *depv1alpha1.DependencyRule) *metav1.Condition {
	t.Helper()
	return s.conditionOf(ctx, t, rule, depv1alpha1.ConditionDependentsLabelled)
}

// conditionOf returns the condition of type kind of rule, nil if it has
// none.
func (s *setup) conditionOf(ctx context.Context, t *testing.T, rule *depv1alpha1.DependencyRule, kind string) *metav1.Condition {
	t.Helper()
	var r depv1alpha1.DependencyRule
	must(t, s.cli.Cluster(logicalcluster.From(rule).Path()).Get(ctx, client.ObjectKey{Name: rule.Name}, &r))
	return meta.FindStatusCondition(r.Status.Conditions, kind)
}

// webhookUser is the user the webhook authenticates as, and webhookAccess
// the ClusterRole with which each provider grants it access (the samples'
// webhook-access.yaml).
const (
	webhookUser   = "dependency-webhook"
	webhookAccess = "dependency-webhook-access"
)

// grantPatch grants (or revokes) the webhook patch on the content of the
// compute provider's APIExport, with which it relabels VirtualMachines,
// and waits until a SubjectAccessReview in the provider's workspace agrees.
func (s *setup) grantPatch(ctx context.Context, t *testing.T, granted bool) {
	t.Helper()
	c := s.cli.Cluster(s.compute)
	var role rbacv1.ClusterRole
	must(t, c.Get(ctx, client.ObjectKey{Name: webhookAccess}, &role))
	for i, r := range role.Rules {
		if slices.Contains(r.Resources, "apiexports/content") {
			verbs := slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v == "patch" })
			if granted {
				verbs = append(verbs, "patch")
			}
			role.Rules[i].Verbs = verbs
		}
	}
	must(t, c.Update(ctx, &role))
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: webhookUser,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "patch", Group: "apis.kcp.io", Resource: "apiexports", Subresource: "content", Name: vms.Group,
			},
		}}
		if last = c.Create(ctx, review); last != nil {
			return false, nil
		}
		return review.Status.Allowed == granted, nil
	}); err != nil {
		t.Logf("granting the webhook patch=%t: no SubjectAccessReview agreed within 30s (last error: %v)", granted, last)
	}
	// kcp's virtual workspace authorizes from caches of its own.
	time.Sleep(2 * time.Second)
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
