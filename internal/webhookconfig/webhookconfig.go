// Package webhookconfig computes the ValidatingWebhookConfigurations that the
// controller installs: one per provider workspace that serves resources
// protected by any DependencyRule (a DELETE webhook) or dependents of its
// own rules (a CREATE and UPDATE webhook that refuses new references to
// objects being deleted). The desired state is computed from the complete
// set of rules every time; nothing here remembers earlier results.
package webhookconfig

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
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
	// workspace that needs one.
	Name = "dependency-controller"
	// WebhookName is the name of the webhook that protects objects from
	// deletion.
	WebhookName = "deletion.dependencies.opendefense.cloud"
	// ReferencesWebhookName is the name of the webhook that refuses new
	// references to objects that are being deleted.
	ReferencesWebhookName = "references.dependencies.opendefense.cloud"

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

// Workspace is a provider workspace with what the webhook guards in it.
type Workspace struct {
	// Path is the workspace path, recorded on the configuration; empty if
	// unknown.
	Path logicalcluster.Path
	// Protected are the resources served by the workspace's APIExports
	// that rules protect from deletion, sorted and without duplicates.
	Protected []schema.GroupVersionResource
	// Dependents are the resources served by the workspace's APIExports
	// that its own rules name as dependents, sorted and without duplicates.
	Dependents []schema.GroupVersionResource
}

// Desired computes from all rules what every workspace needs: the resources
// each dependency protects go to the workspace at its apiExportRef.path,
// found in workspaces (workspace paths to logical clusters); the dependent
// of each rule goes to the rule's own workspace, which serves it. It returns
// the workspaces by logical cluster, and the paths that no workspace in
// workspaces has, sorted.
func Desired(rules []depv1alpha1.DependencyRule, workspaces map[string]logicalcluster.Name) (map[logicalcluster.Name]*Workspace, []logicalcluster.Path) {
	pathOf := make(map[logicalcluster.Name]string, len(workspaces))
	for path, cluster := range workspaces {
		pathOf[cluster] = path
	}
	desired := map[logicalcluster.Name]*Workspace{}
	get := func(cluster logicalcluster.Name) *Workspace {
		ws, ok := desired[cluster]
		if !ok {
			ws = &Workspace{Path: logicalcluster.NewPath(pathOf[cluster])}
			desired[cluster] = ws
		}
		return ws
	}
	unresolved := map[string]bool{}
	for i := range rules {
		rule := &rules[i]
		d := rule.Spec.Dependent
		own := get(logicalcluster.From(rule))
		own.Dependents = append(own.Dependents, schema.GroupVersionResource{Group: d.Group, Version: d.Version, Resource: d.Resource})
		for _, dep := range rule.Spec.Dependencies {
			cluster, ok := workspaces[dep.APIExportRef.Path]
			if !ok {
				unresolved[dep.APIExportRef.Path] = true
				continue
			}
			ws := get(cluster)
			ws.Protected = append(ws.Protected, schema.GroupVersionResource{Group: dep.Group, Version: dep.Version, Resource: dep.Resource})
		}
	}
	for _, ws := range desired {
		slices.SortFunc(ws.Protected, compareGVR)
		ws.Protected = slices.Compact(ws.Protected)
		slices.SortFunc(ws.Dependents, compareGVR)
		ws.Dependents = slices.Compact(ws.Dependents)
	}
	paths := make([]logicalcluster.Path, 0, len(unresolved))
	for _, p := range slices.Sorted(maps.Keys(unresolved)) {
		paths = append(paths, logicalcluster.NewPath(p))
	}
	return desired, paths
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

// Build returns the desired configuration for a workspace (logical cluster
// cluster): a webhook with a DELETE rule per protected group and resource,
// and one with a CREATE and UPDATE rule per dependent group and resource,
// each listing every version that rules name; a webhook with no rules is
// left out.
func Build(ws *Workspace, cluster logicalcluster.Name, opts Options) *admissionregistrationv1.ValidatingWebhookConfiguration {
	var caBundle []byte
	if len(opts.CABundle) > 0 {
		caBundle = bytes.Clone(opts.CABundle)
	}
	webhook := func(name string, resources []schema.GroupVersionResource, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name: name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      ptr.To(WebhookURL(opts.URL, cluster)),
				CABundle: caBundle,
			},
			Rules:                   rules(resources, ops),
			FailurePolicy:           ptr.To(opts.FailurePolicy),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(opts.TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
		}
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "ValidatingWebhookConfiguration",
		},
		ObjectMeta: metav1.ObjectMeta{
			Name:   Name,
			Labels: map[string]string{ManagedByLabel: ManagedByValue},
		},
	}
	if !ws.Path.Empty() {
		cfg.Annotations = map[string]string{WorkspacePathAnnotation: ws.Path.String()}
	}
	if len(ws.Protected) > 0 {
		cfg.Webhooks = append(cfg.Webhooks, webhook(WebhookName, ws.Protected, admissionregistrationv1.Delete))
	}
	if len(ws.Dependents) > 0 {
		cfg.Webhooks = append(cfg.Webhooks, webhook(ReferencesWebhookName, ws.Dependents, admissionregistrationv1.Create, admissionregistrationv1.Update))
	}
	return cfg
}

// rules returns one rule per group and resource with ops, listing every
// version of it in resources (which are sorted).
func rules(resources []schema.GroupVersionResource, ops []admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
	var out []admissionregistrationv1.RuleWithOperations
	for _, gvr := range resources {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.APIGroups[0] == gvr.Group && last.Resources[0] == gvr.Resource {
				last.APIVersions = append(last.APIVersions, gvr.Version)
				continue
			}
		}
		out = append(out, admissionregistrationv1.RuleWithOperations{
			Operations: slices.Clone(ops),
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{gvr.Group},
				APIVersions: []string{gvr.Version},
				Resources:   []string{gvr.Resource},
				Scope:       ptr.To(admissionregistrationv1.AllScopes),
			},
		})
	}
	return out
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
