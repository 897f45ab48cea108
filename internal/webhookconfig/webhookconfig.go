// Package webhookconfig computes the ValidatingWebhookConfigurations that the
// controller installs: one per provider workspace whose resources are
// protected by any DependencyRule, with one DELETE rule per protected
// resource. The desired state is computed from the complete set of rules
// every time; nothing here remembers earlier results.
package webhookconfig

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

const (
	// Name is the name of the ValidatingWebhookConfiguration in every
	// protected workspace.
	Name = "dependency-controller"
	// WebhookName is the name of the single webhook in the configuration.
	WebhookName = "deletion.dependencies.opendefense.cloud"

	// ManagedByLabel and ManagedByValue mark the configurations this
	// controller owns; only those are updated or pruned.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel.
	ManagedByValue = "dependency-controller"
	// WorkspacePathAnnotation records the workspace path the configuration
	// was installed for, so that it is not pruned while its path cannot be
	// resolved.
	WorkspacePathAnnotation = "dependencies.opendefense.cloud/workspace-path"
)

// Options are the webhook client settings shared by all configurations.
type Options struct {
	// URL is the HTTPS URL of the webhook's validating endpoint. Every
	// configuration calls it with the logical cluster of its workspace
	// appended (see WebhookURL).
	URL string
	// CABundle is the PEM encoded CA bundle that verifies the webhook's
	// serving certificate. Empty means the system roots of kcp.
	CABundle []byte
	// TimeoutSeconds is how long kcp waits for the webhook (1 to 30).
	TimeoutSeconds int32
	// FailurePolicy is what kcp does when the webhook cannot be reached.
	FailurePolicy admissionregistrationv1.FailurePolicyType
}

// Target is a provider workspace with the resources protected in it.
type Target struct {
	// Path is the workspace path, as written in apiExportRef.path.
	Path logicalcluster.Path
	// Resources are the protected resources, sorted and without duplicates.
	Resources []schema.GroupVersionResource
}

// Targets groups the dependencies of all rules by the workspace path of the
// protected APIExport, sorted by path.
func Targets(rules []depv1alpha1.DependencyRule) []Target {
	byPath := map[string]*Target{}
	for i := range rules {
		rule := &rules[i]
		for _, dep := range rule.Spec.Dependencies {
			t, ok := byPath[dep.APIExportRef.Path]
			if !ok {
				t = &Target{Path: logicalcluster.NewPath(dep.APIExportRef.Path)}
				byPath[dep.APIExportRef.Path] = t
			}
			t.Resources = append(t.Resources, schema.GroupVersionResource{Group: dep.Group, Version: dep.Version, Resource: dep.Resource})
		}
	}

	targets := make([]Target, 0, len(byPath))
	for _, t := range byPath {
		slices.SortFunc(t.Resources, compareGVR)
		t.Resources = slices.Compact(t.Resources)
		targets = append(targets, *t)
	}
	slices.SortFunc(targets, func(a, b Target) int { return cmp.Compare(a.Path.String(), b.Path.String()) })
	return targets
}

func compareGVR(a, b schema.GroupVersionResource) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Version, b.Version))
}

// WebhookURL returns the URL with which the configuration in the workspace
// of logical cluster cluster calls the webhook: kcp calls a workspace's
// configuration only for objects that the workspace's APIExports serve, so
// the webhook learns from the URL whose objects a request is about.
func WebhookURL(base string, cluster logicalcluster.Name) string {
	return strings.TrimSuffix(base, "/") + "/" + cluster.String()
}

// Build returns the desired configuration for a target workspace (logical
// cluster cluster): one webhook with a DELETE rule per protected group and
// resource, listing every version that rules name.
func Build(target Target, cluster logicalcluster.Name, opts Options) *admissionregistrationv1.ValidatingWebhookConfiguration {
	var rules []admissionregistrationv1.RuleWithOperations
	for _, gvr := range target.Resources {
		if n := len(rules); n > 0 {
			last := &rules[n-1]
			if last.APIGroups[0] == gvr.Group && last.Resources[0] == gvr.Resource {
				last.APIVersions = append(last.APIVersions, gvr.Version)
				continue
			}
		}
		rules = append(rules, admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{gvr.Group},
				APIVersions: []string{gvr.Version},
				Resources:   []string{gvr.Resource},
				Scope:       ptr.To(admissionregistrationv1.AllScopes),
			},
		})
	}

	var caBundle []byte
	if len(opts.CABundle) > 0 {
		caBundle = bytes.Clone(opts.CABundle)
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingWebhookConfiguration",
		},
		ObjectMeta: metav1.ObjectMeta{
			Name:        Name,
			Labels:      map[string]string{ManagedByLabel: ManagedByValue},
			Annotations: map[string]string{WorkspacePathAnnotation: target.Path.String()},
		},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: WebhookName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      ptr.To(WebhookURL(opts.URL, cluster)),
				CABundle: caBundle,
			},
			Rules:                   rules,
			FailurePolicy:           ptr.To(opts.FailurePolicy),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(opts.TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
		}},
	}
}

// NeedsUpdate reports whether existing differs from desired in anything this
// controller owns: its labels, annotations and webhooks. Fields defaulted by
// the server are compared after defaulting desired the same way.
func NeedsUpdate(existing, desired *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
	for k, v := range desired.Labels {
		if existing.Labels[k] != v {
			return true
		}
	}
	for k, v := range desired.Annotations {
		if existing.Annotations[k] != v {
			return true
		}
	}
	return !equality.Semantic.DeepEqual(existing.Webhooks, desired.Webhooks)
}

// Merge returns a copy of existing with the fields this controller owns set
// as in desired; everything else of existing (other labels, annotations,
// metadata) is kept.
func Merge(existing, desired *admissionregistrationv1.ValidatingWebhookConfiguration) *admissionregistrationv1.ValidatingWebhookConfiguration {
	merged := existing.DeepCopy()
	if merged.Labels == nil {
		merged.Labels = map[string]string{}
	}
	for k, v := range desired.Labels {
		merged.Labels[k] = v
	}
	if merged.Annotations == nil {
		merged.Annotations = map[string]string{}
	}
	for k, v := range desired.Annotations {
		merged.Annotations[k] = v
	}
	merged.Webhooks = desired.DeepCopy().Webhooks
	return merged
}

// Describe returns a short description of the resources protected in a
// target, e.g. "vpcs.network.example.io/v1, subnets.network.example.io/v1".
func Describe(resources []schema.GroupVersionResource) string {
	s := ""
	for i, gvr := range resources {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s.%s/%s", gvr.Resource, gvr.Group, gvr.Version)
	}
	return s
}
