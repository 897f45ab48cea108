// Package webhookconfig computes the ValidatingWebhookConfigurations that the
// controller installs: one per provider workspace that serves resources
// protected by any DependencyRule (a DELETE webhook) or dependents of its
// own rules (a CREATE and UPDATE webhook that refuses new references to
// objects being deleted). The desired state is computed from the complete
// set of rules every time, as the apply configuration of the fields the
// controller owns; nothing here remembers earlier results.
package webhookconfig

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/util/csaupgrade"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/marks"
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

	// ReferencesConditionName is the name of the match condition of the
	// check of new references (see ReferencesCondition).
	ReferencesConditionName = "references-may-change"

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
	// ReferenceFields are the top-level fields of the dependents in which
	// the references of its own rules lie (e.g. spec for
	// .spec.vpcRef.name), sorted and without duplicates. kcp calls the
	// check of new references for an UPDATE only if one of them changed;
	// empty: for every UPDATE.
	ReferenceFields []string
	// Cleared are the fingerprints (see package marks) of the protected
	// resources whose objects the DELETE webhook skips when they carry the
	// unreferenced label with that value, sorted: those whose every rule
	// reports ReferencesGuarded=True for its current generation and none
	// is being deleted. See Qualifies.
	Cleared []string
}

// Qualifies reports whether the clearances of a protected resource may
// keep its objects from the DELETE webhook under rules, all the rules that
// protect it: every rule reports, for its current generation,
// ReferencesGuarded=True (the webhook can read the objects, so it removes a
// clearance before it admits a new reference) and WebhooksInstalled=True
// (kcp calls that check for every new reference), and no rule is being
// deleted (its clearances are being removed).
func Qualifies(rules []*depv1alpha1.DependencyRule) bool {
	if len(rules) == 0 {
		return false
	}
	for _, rule := range rules {
		if rule.DeletionTimestamp != nil {
			return false
		}
		for _, t := range []string{depv1alpha1.ConditionReferencesGuarded, depv1alpha1.ConditionWebhooksInstalled} {
			c := meta.FindStatusCondition(rule.Status.Conditions, t)
			if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != rule.Generation {
				return false
			}
		}
	}
	return true
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
	// The rules that protect each resource of each workspace.
	type protected struct {
		cluster  logicalcluster.Name
		resource schema.GroupResource
	}
	protecting := map[protected][]*depv1alpha1.DependencyRule{}
	for i := range rules {
		rule := &rules[i]
		d := rule.Spec.Dependent
		own := get(logicalcluster.From(rule))
		own.Dependents = append(own.Dependents, schema.GroupVersionResource{Group: d.Group, Version: d.Version, Resource: d.Resource})
		for _, dep := range rule.Spec.Dependencies {
			own.ReferenceFields = append(own.ReferenceFields, topLevelField(dep.FieldRef.Path))
			cluster, ok := workspaces[dep.APIExportRef.Path]
			if !ok {
				unresolved[dep.APIExportRef.Path] = true
				continue
			}
			ws := get(cluster)
			ws.Protected = append(ws.Protected, schema.GroupVersionResource{Group: dep.Group, Version: dep.Version, Resource: dep.Resource})
			p := protected{cluster, schema.GroupResource{Group: dep.Group, Resource: dep.Resource}}
			if !slices.Contains(protecting[p], rule) {
				protecting[p] = append(protecting[p], rule)
			}
		}
	}
	for p, rs := range protecting {
		if !Qualifies(rs) {
			continue
		}
		covered := make([]marks.Rule, 0, len(rs))
		for _, rule := range rs {
			covered = append(covered, marks.RuleOf(rule))
		}
		ws := desired[p.cluster]
		ws.Cleared = append(ws.Cleared, marks.Fingerprint(p.cluster, p.resource, covered))
	}
	for _, ws := range desired {
		slices.SortFunc(ws.Protected, compareGVR)
		ws.Protected = slices.Compact(ws.Protected)
		slices.SortFunc(ws.Dependents, compareGVR)
		ws.Dependents = slices.Compact(ws.Dependents)
		slices.Sort(ws.Cleared)
		slices.Sort(ws.ReferenceFields)
		ws.ReferenceFields = slices.Compact(ws.ReferenceFields)
		if slices.Contains(ws.ReferenceFields, "") {
			// A path that does not parse (the schema rejects it): every
			// UPDATE is checked.
			ws.ReferenceFields = nil
		}
	}
	paths := make([]logicalcluster.Path, 0, len(unresolved))
	for _, p := range slices.Sorted(maps.Keys(unresolved)) {
		paths = append(paths, logicalcluster.NewPath(p))
	}
	return desired, paths
}

// topLevelField returns the first field name of a field path, or "" if it
// does not parse.
func topLevelField(path string) string {
	p, err := fieldpath.Parse(path)
	if err != nil {
		return ""
	}
	return p.Steps()[0]
}

// ReferencesCondition returns the CEL expression of the match condition of
// the check of new references: every CREATE, and an UPDATE that changes
// one of fields (top-level fields of the object; see
// Workspace.ReferenceFields). An UPDATE that changes none of them, such as
// one of labels, annotations or finalizers only, adds no reference, so kcp
// need not call the webhook for it.
func ReferencesCondition(fields []string) string {
	quoted := make([]string, len(fields))
	for i, f := range fields {
		quoted[i] = strconv.Quote(f)
	}
	return "request.operation != 'UPDATE' || [" + strings.Join(quoted, ", ") + "]" +
		".exists(f, (f in object) != (f in oldObject) || f in object && object[f] != oldObject[f])"
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

// Configuration returns the apply configuration of the webhook
// configuration of a workspace (logical cluster cluster): exactly the fields
// the controller owns, which server-side apply sets and keeps, leaving every
// other field to the server's defaults or to whoever else sets it. It has a
// webhook with a DELETE rule per protected group and resource, and one with
// a CREATE and UPDATE rule per dependent group and resource, each listing
// every version that rules name; a webhook with no rules is left out.
func Configuration(ws *Workspace, cluster logicalcluster.Name, opts Options) *admissionregistrationv1ac.ValidatingWebhookConfigurationApplyConfiguration {
	webhook := func(name string, resources []schema.GroupVersionResource, sideEffects admissionregistrationv1.SideEffectClass, ops ...admissionregistrationv1.OperationType) *admissionregistrationv1ac.ValidatingWebhookApplyConfiguration {
		clientConfig := admissionregistrationv1ac.WebhookClientConfig().WithURL(WebhookURL(opts.URL, cluster))
		if len(opts.CABundle) > 0 {
			clientConfig.WithCABundle(bytes.Clone(opts.CABundle)...)
		}
		return admissionregistrationv1ac.ValidatingWebhook().
			WithName(name).
			WithClientConfig(clientConfig).
			WithRules(rules(resources, ops)...).
			WithFailurePolicy(opts.FailurePolicy).
			// Equivalent (v1's default, stated as the intent): kcp also
			// calls the webhook for versions of a resource that no rule
			// names, converted to one that a rule names.
			WithMatchPolicy(admissionregistrationv1.Equivalent).
			WithSideEffects(sideEffects).
			WithTimeoutSeconds(opts.TimeoutSeconds).
			WithAdmissionReviewVersions("v1").
			// An empty namespace selector: every namespace. Owning the
			// selectors means that a selector someone else sets, which
			// would narrow the protection, is taken back.
			WithNamespaceSelector(metav1ac.LabelSelector()).
			WithObjectSelector(metav1ac.LabelSelector())
	}
	deletion := func() *admissionregistrationv1ac.ValidatingWebhookApplyConfiguration {
		// A denied DELETE under a rule with the Replay deletion policy is
		// recorded on the object, except in a dry run.
		wh := webhook(WebhookName, ws.Protected, admissionregistrationv1.SideEffectClassNoneOnDryRun, admissionregistrationv1.Delete)
		if len(ws.Cleared) > 0 && opts.FailurePolicy == admissionregistrationv1.Fail {
			// kcp matches the selector against the stored object on
			// DELETE: an object cleared under the current rules does not
			// reach the webhook. NotIn with no values is invalid, so
			// without clearances the selector stays empty. With the
			// failure policy Ignore, a new reference can pass without the
			// check that removes the clearance, so none is honoured.
			wh.WithObjectSelector(ObjectSelector(ws.Cleared))
		}
		return wh
	}
	cfg := admissionregistrationv1ac.ValidatingWebhookConfiguration(Name).
		WithLabels(map[string]string{ManagedByLabel: ManagedByValue})
	if !ws.Path.Empty() {
		cfg.WithAnnotations(map[string]string{WorkspacePathAnnotation: ws.Path.String()})
	}
	if len(ws.Protected) > 0 {
		cfg.WithWebhooks(deletion())
	}
	if len(ws.Dependents) > 0 {
		wh := webhook(ReferencesWebhookName, ws.Dependents, admissionregistrationv1.SideEffectClassNone, admissionregistrationv1.Create, admissionregistrationv1.Update)
		if len(ws.ReferenceFields) > 0 {
			wh.WithMatchConditions(admissionregistrationv1ac.MatchCondition().
				WithName(ReferencesConditionName).
				WithExpression(ReferencesCondition(ws.ReferenceFields)))
		}
		cfg.WithWebhooks(wh)
	}
	return cfg
}

// ObjectSelector returns the object selector of the DELETE webhook that
// lets objects carrying the unreferenced label with one of the
// fingerprints cleared pass without calling the webhook.
func ObjectSelector(cleared []string) *metav1ac.LabelSelectorApplyConfiguration {
	return metav1ac.LabelSelector().WithMatchExpressions(metav1ac.LabelSelectorRequirement().
		WithKey(depv1alpha1.LabelUnreferenced).
		WithOperator(metav1.LabelSelectorOpNotIn).
		WithValues(cleared...))
}

// Skipped returns the fingerprints whose clearances the DELETE webhook of
// cfg skips (the values of its NotIn requirement on the unreferenced
// label), or nil.
func Skipped(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) []string {
	var out []string
	for _, wh := range cfg.Webhooks {
		if wh.Name != WebhookName || wh.ObjectSelector == nil {
			continue
		}
		for _, req := range wh.ObjectSelector.MatchExpressions {
			if req.Key == depv1alpha1.LabelUnreferenced && req.Operator == metav1.LabelSelectorOpNotIn {
				out = append(out, req.Values...)
			}
		}
	}
	return out
}

// DropSelectorPatch returns a JSON patch that empties the object selector
// of the DELETE webhook of existing, or nil if ws (the desired state) has
// clearances or existing skips none. Server-side apply cannot do it: the
// selector is an atomic struct, and applying the empty one leaves the
// stored requirements in place. Emptying it only makes more DELETEs reach
// the webhook, so it needs no precondition besides the webhook's position.
func DropSelectorPatch(existing *admissionregistrationv1.ValidatingWebhookConfiguration, ws *Workspace, opts Options) []byte {
	if len(ws.Cleared) > 0 && opts.FailurePolicy == admissionregistrationv1.Fail {
		return nil
	}
	for i, wh := range existing.Webhooks {
		if wh.Name != WebhookName || wh.ObjectSelector == nil || len(wh.ObjectSelector.MatchExpressions) == 0 {
			continue
		}
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": fmt.Sprintf("/webhooks/%d/name", i), "value": WebhookName},
			{"op": "remove", "path": fmt.Sprintf("/webhooks/%d/objectSelector/matchExpressions", i)},
		})
		if err != nil {
			panic(fmt.Sprintf("failed to encode a JSON patch: %v", err)) // cannot happen: plain data
		}
		return patch
	}
	return nil
}

// Build returns the configuration of Configuration as an object, for tests
// and tools that create it directly, as the controller would.
func Build(ws *Workspace, cluster logicalcluster.Name, opts Options) *admissionregistrationv1.ValidatingWebhookConfiguration {
	raw, err := json.Marshal(Configuration(ws, cluster, opts))
	if err != nil {
		panic(fmt.Sprintf("failed to encode a ValidatingWebhookConfiguration: %v", err)) // cannot happen: plain data
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := json.Unmarshal(raw, cfg); err != nil {
		panic(fmt.Sprintf("failed to decode a ValidatingWebhookConfiguration: %v", err)) // cannot happen: the same type
	}
	return cfg
}

// rules returns one rule per group and resource with ops, listing every
// version of it in resources (which are sorted).
func rules(resources []schema.GroupVersionResource, ops []admissionregistrationv1.OperationType) []*admissionregistrationv1ac.RuleWithOperationsApplyConfiguration {
	var out []*admissionregistrationv1ac.RuleWithOperationsApplyConfiguration
	for _, gvr := range resources {
		if n := len(out); n > 0 {
			last := out[n-1]
			if last.APIGroups[0] == gvr.Group && last.Resources[0] == gvr.Resource {
				last.WithAPIVersions(gvr.Version)
				continue
			}
		}
		// The scope is all scopes, the default. The rules are an atomic
		// list, which the controller owns as a whole as stored, defaults
		// included, so stating it also keeps what it applies equal to what
		// it owns.
		out = append(out, admissionregistrationv1ac.RuleWithOperations().
			WithOperations(ops...).
			WithAPIGroups(gvr.Group).
			WithAPIVersions(gvr.Version).
			WithResources(gvr.Resource).
			WithScope(admissionregistrationv1.AllScopes))
	}
	return out
}

// IsManaged reports whether cfg carries the label of the configurations
// that the controller manages. Only those are written or deleted.
func IsManaged(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
	return cfg.Labels[ManagedByLabel] == ManagedByValue
}

// UpToDate reports whether applying desired under fieldManager would
// change nothing: the fields that fieldManager applied to existing, as its
// managed fields record them, are exactly desired; fieldManager owns nothing
// through an update besides (see UpgradeManagedFieldsPatch); and existing
// has no webhook of the controller's that desired lacks. A field that
// someone else changed or took over counts as a difference. It is false if
// the managed fields cannot be read.
func UpToDate(existing *admissionregistrationv1.ValidatingWebhookConfiguration, desired *admissionregistrationv1ac.ValidatingWebhookConfigurationApplyConfiguration, fieldManager string) bool {
	for _, mf := range existing.ManagedFields {
		if mf.Manager == fieldManager && mf.Operation == metav1.ManagedFieldsOperationUpdate {
			return false
		}
	}
	for _, wh := range existing.Webhooks {
		if (wh.Name == WebhookName || wh.Name == ReferencesWebhookName) &&
			!slices.ContainsFunc(desired.Webhooks, func(d admissionregistrationv1ac.ValidatingWebhookApplyConfiguration) bool { return *d.Name == wh.Name }) {
			return false
		}
	}
	owned, err := admissionregistrationv1ac.ExtractValidatingWebhookConfiguration(existing, fieldManager)
	if err != nil {
		return false
	}
	return equality.Semantic.DeepEqual(owned, desired)
}

// UpgradeManagedFieldsPatch returns a JSON patch that folds what
// fieldManager owns of existing through updates into what it owns through
// applies, or nil if it owns nothing through updates. kcp's virtual
// workspace executes an apply as a create or an update of the object it
// computes, which the shard records as an update by fieldManager besides
// its apply; a field that only that update owns would outlive its omission
// from later applies, such as the webhook of a workspace that needs it no
// more. The patch fails with a conflict if existing is not the current
// version.
func UpgradeManagedFieldsPatch(existing *admissionregistrationv1.ValidatingWebhookConfiguration, fieldManager string) ([]byte, error) {
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(existing, sets.New(fieldManager), fieldManager)
	if err != nil {
		return nil, fmt.Errorf("failed to fold the fields %s owns through updates into its applied ones: %w", fieldManager, err)
	}
	return patch, nil
}

// guarded is one operation on one version of a resource that a webhook of
// the configuration is called for.
type guarded struct {
	webhook                  string
	operation                admissionregistrationv1.OperationType
	group, version, resource string
}

// Reduces reports whether replacing existing with the configuration of ws
// (nil: deleting it) stops the webhook from being called for an operation
// on a resource version that existing has it called for: whether the change
// takes protection away. A changed match condition of the check of new
// references counts unless the new configuration has none (it is then
// called for every UPDATE). Changes of the client settings (URL, CA bundle,
// timeout, failure policy) do not count.
func Reduces(existing *admissionregistrationv1.ValidatingWebhookConfiguration, ws *Workspace) bool {
	keep := map[guarded]bool{}
	condition := ""
	if ws != nil && len(ws.ReferenceFields) > 0 {
		condition = ReferencesCondition(ws.ReferenceFields)
	}
	if ws != nil {
		add := func(webhook string, resources []schema.GroupVersionResource, ops ...admissionregistrationv1.OperationType) {
			for _, gvr := range resources {
				for _, op := range ops {
					keep[guarded{webhook, op, gvr.Group, gvr.Version, gvr.Resource}] = true
				}
			}
		}
		add(WebhookName, ws.Protected, admissionregistrationv1.Delete)
		add(ReferencesWebhookName, ws.Dependents, admissionregistrationv1.Create, admissionregistrationv1.Update)
	}
	for _, wh := range existing.Webhooks {
		if wh.Name == ReferencesWebhookName && condition != "" &&
			(len(wh.MatchConditions) != 1 || wh.MatchConditions[0].Expression != condition) {
			return true
		}
		for _, r := range wh.Rules {
			for _, op := range r.Operations {
				for _, g := range r.APIGroups {
					for _, v := range r.APIVersions {
						for _, res := range r.Resources {
							if !keep[guarded{wh.Name, op, g, v, res}] {
								return true
							}
						}
					}
				}
			}
		}
	}
	return false
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
