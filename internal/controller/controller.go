package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	depac "github.com/opendefensecloud/dependency-controller/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/depgraph"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
	rulestatus "github.com/opendefensecloud/dependency-controller/internal/status"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "dependency-controller"

// FieldOwner is the field manager under which the controller applies the
// webhook configurations and its part of the status of rules.
const FieldOwner = "dependency-controller"

// Event reasons.
const (
	EventReasonResolutionFailed = "ResolutionFailed"
	EventReasonInstallFailed    = "WebhookInstallFailed"
	EventReasonCycleDetected    = "DependencyCycle"
	EventReasonProtecting       = "Protecting"
)

// Options configure the Reconciler.
type Options struct {
	// APIExportName is the name of the APIExport that serves DependencyRules,
	// and of its APIExportEndpointSlice, in the workspace of the kubeconfig.
	APIExportName string
	// Webhook returns the current webhook client settings. It is called on
	// every reconcile, so that a new URL or a rotated CA bundle is rolled out
	// to every configuration.
	Webhook func() webhookconfig.Options
	// ResyncPeriod is how often the state is recomputed without an event.
	ResyncPeriod time.Duration
	// Metrics, if set, report whether each rule is Ready after every
	// reconcile.
	Metrics *Metrics
	// KCP is the version of kcp, read at start, which every rule reports
	// in its KCPVersionTested condition.
	KCP kcpversion.Info
}

// Reconciler installs the validating webhook configuration in every
// provider workspace whose resources a DependencyRule protects (a webhook on
// DELETE) or whose rules name dependents (a webhook on CREATE and UPDATE),
// removes it from workspaces where nothing is protected or guarded any
// more, and reports the outcome in the status of every rule.
//
// It has a single work item: every event (on rules, on webhook
// configurations, on APIBindings) and the periodic resync reconcile the
// complete state, computed from what is in kcp, never from memory: rules
// deleted while the controller was down, or configurations edited by
// someone else, are corrected on the next reconcile. No finalizer is needed
// on rules for the same reason.
//
// It reads the state from the manager's caches of the engaged workspaces
// and writes through their clients, with server-side apply under
// FieldOwner.
//
// What the caches hold exists, or existed a moment ago, so conclusions
// drawn from the presence of something are taken from them: a webhook
// configuration is installed or extended, a path resolved, a cycle found.
// But the caches can lack what exists: a workspace is engaged only after the
// manager found its binding (at startup, one after the other), and a cache
// lags behind kcp. Conclusions drawn from the absence of something are
// therefore proven:
//
//   - The first reconcile waits until the manager has engaged every
//     workspace of a complete listing (CompleteLister: uncached, across all
//     shards), or engageTimeout has passed, and decides from that listing.
//   - If the cached view would delete a configuration, remove anything from
//     one, leave a path unresolved or report a cycle gone, the reconcile
//     lists completely and decides from that listing instead; if the
//     listing fails, nothing is written. (So while a rule names a path that
//     no workspace binds, every reconcile lists completely.)
//   - A configuration is created, not applied, in a workspace whose cache
//     has none: the create fails if a configuration of that name exists,
//     which an apply would take over though the controller might not manage
//     it; a live read then tells.
//
// Nothing else needs proof: a configuration installed or extended for a
// rule that was just deleted, while the cache still holds it, protects more
// than needed until the deletion reaches the cache and triggers the next
// reconcile.
type Reconciler struct {
	clusters Clusters
	lister   CompleteLister
	opts     Options

	// caughtUp is set once the manager has engaged every workspace that
	// binds the export, or engageTimeout after the first reconcile.
	// Reconciles run one at a time, so it needs no lock.
	caughtUp bool
	// waitingSince is when the first reconcile started.
	waitingSince time.Time
}

// NewReconciler returns a Reconciler that reads the state from the caches
// of clusters, proves what they lack with lister, and writes through the
// clients of clusters.
func NewReconciler(clusters Clusters, lister CompleteLister, opts Options) *Reconciler {
	return &Reconciler{clusters: clusters, lister: lister, opts: opts}
}

// engageTimeout bounds how long the first reconcile waits for the manager
// to engage every workspace that binds the export; it is
// multicluster-runtime's timeout for a workspace's cache to sync. A
// workspace whose binding is not ready is never engaged: the first
// reconcile then proceeds without it after this time, and reports it.
const engageTimeout = 30 * time.Second

// Reconcile implements mcreconcile.Reconciler. The request is ignored: see
// Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, _ mcreconcile.Request) (reconcile.Result, error) {
	start := time.Now()
	logger := log.FromContext(ctx)
	var startup *Listing
	if !r.caughtUp {
		// At startup the manager engages the workspaces one after the
		// other; until it has engaged all, the caches lack most of the
		// state, so the first reconcile waits for them and decides from a
		// complete listing.
		listing, err := r.lister.ListComplete(ctx)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("failed to list the rules and bindings on every shard: %w", err)
		}
		if r.waitingSince.IsZero() {
			r.waitingSince = start
		}
		if missing := notEngaged(listing, r.clusters); len(missing) > 0 {
			if time.Since(r.waitingSince) < engageTimeout {
				logger.V(1).Info("Waiting for the manager to engage every workspace that binds the export", "notEngaged", missing)
				return reconcile.Result{RequeueAfter: time.Second}, nil
			}
			logger.Info("Workspaces that bind the export are still not engaged; reconciling without them", "notEngaged", missing, "waited", time.Since(r.waitingSince))
		}
		r.caughtUp, startup = true, listing
	}
	state, err := observe(ctx, r.clusters)
	if err != nil {
		return reconcile.Result{}, err
	}
	if startup != nil {
		state.Listing, state.Complete = *startup, true
	}
	p := r.plan(state)
	if reason := p.absenceToProve(state); reason != "" {
		logger.V(1).Info("Confirming with a complete listing what the caches lack", "reason", reason)
		listing, err := r.lister.ListComplete(ctx)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("failed to confirm with a complete listing that %s: %w", reason, err)
		}
		state.Listing, state.Complete = *listing, true
		p = r.plan(state)
	}
	if err := r.reconcile(ctx, state, p); err != nil {
		return reconcile.Result{}, err
	}
	logger.V(1).Info("Reconciled", "rules", len(state.Rules), "complete", state.Complete, "duration", time.Since(start))
	return reconcile.Result{RequeueAfter: r.opts.ResyncPeriod}, nil
}

// notEngaged returns the logical clusters of the workspaces and rules of a
// listing that clusters has not engaged, sorted.
func notEngaged(listing *Listing, clusters Clusters) []logicalcluster.Name {
	engaged := map[logicalcluster.Name]bool{}
	for _, c := range clusters.Engaged() {
		engaged[c] = true
	}
	missing := map[logicalcluster.Name]bool{}
	for _, c := range listing.Workspaces {
		if !engaged[c] {
			missing[c] = true
		}
	}
	for i := range listing.Rules {
		if c := logicalcluster.From(&listing.Rules[i]); !engaged[c] {
			missing[c] = true
		}
	}
	return slices.Sorted(maps.Keys(missing))
}

// plan is what a state calls for.
type plan struct {
	// desired are the workspaces that need a webhook configuration, by
	// logical cluster.
	desired map[logicalcluster.Name]*webhookconfig.Workspace
	// unresolved are the paths that no workspace binding the export has.
	unresolved []logicalcluster.Path
	// cycles are the type cycles of every rule that is on one.
	cycles map[kcp.ObjectKey][]depgraph.Cycle
}

func (r *Reconciler) plan(state *State) plan {
	desired, unresolved := webhookconfig.Desired(state.Rules, state.Workspaces)
	return plan{desired: desired, unresolved: unresolved, cycles: depgraph.Build(state.Rules).CyclesByRule()}
}

// absenceToProve returns what the plan concludes from the absence of
// something in a state read from the caches, or "" if nothing: see
// Reconciler. A state from a complete listing needs no proof.
func (p plan) absenceToProve(state *State) string {
	if state.Complete {
		return ""
	}
	if len(p.unresolved) > 0 {
		return fmt.Sprintf("no workspace at %s binds the export", p.unresolved[0])
	}
	clusters := map[logicalcluster.Name]bool{}
	for c := range state.Configs {
		clusters[c] = true
	}
	for c := range state.Mutating {
		clusters[c] = true
	}
	for _, cluster := range slices.Sorted(maps.Keys(clusters)) {
		validating, mutating := state.Configs[cluster], state.Mutating[cluster]
		if validating != nil && !webhookconfig.IsManaged(validating) {
			validating = nil
		}
		if mutating != nil && !webhookconfig.IsManaged(mutating) {
			mutating = nil
		}
		if webhookconfig.Reduces(validating, mutating, p.desired[cluster]) {
			return fmt.Sprintf("the webhook configurations in logical cluster %s guard or label resources that no rule needs any more", cluster)
		}
	}
	for i := range state.Rules {
		rule := &state.Rules[i]
		if meta.IsStatusConditionTrue(rule.Status.Conditions, depv1alpha1.ConditionDependencyCycle) && len(p.cycles[kcp.KeyOf(rule)]) == 0 {
			return fmt.Sprintf("the rule %s is on no cycle any more", kcp.KeyOf(rule))
		}
	}
	return ""
}

// reconcile brings kcp to the desired state of the plan.
func (r *Reconciler) reconcile(ctx context.Context, state *State, p plan) error {
	webhookOpts := r.opts.Webhook()
	res := results{installed: make(map[logicalcluster.Name]error, len(p.desired)), unresolved: map[string]error{}}
	var errs []error
	if err := r.dropLegacyFinalizers(ctx, state.Rules); err != nil {
		errs = append(errs, err)
	}
	for _, path := range p.unresolved {
		err := fmt.Errorf("no workspace at %s binds the APIExport %s: the workspace does not exist, or it has not bound the export (bind it and accept its permission claims)",
			path, r.opts.APIExportName)
		res.unresolved[path.String()] = err
		errs = append(errs, fmt.Errorf("%s: %w", path, err))
	}
	for _, cluster := range slices.Sorted(maps.Keys(p.desired)) {
		ws := p.desired[cluster]
		err := r.install(ctx, state, cluster, ws, webhookOpts)
		res.installed[cluster] = err
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", describeWorkspace(cluster, ws.Path), err))
		}
	}
	if err := r.prune(ctx, state, p.desired, res.unresolved); err != nil {
		errs = append(errs, err)
	}

	ready := make(map[kcp.ObjectKey]bool, len(state.Rules))
	for i := range state.Rules {
		rule := &state.Rules[i]
		key := kcp.KeyOf(rule)
		status := computeStatus(rule, state.Workspaces, res, p.cycles[key])
		meta.SetStatusCondition(&status.Conditions, kcpCondition(r.opts.KCP, rule.Generation))
		ready[key] = meta.IsStatusConditionTrue(status.Conditions, depv1alpha1.ConditionReady)
		if err := r.updateStatus(ctx, rule, status); err != nil {
			errs = append(errs, err)
		}
	}
	r.opts.Metrics.rulesReady(ready)
	return kerrors.NewAggregate(errs)
}

// describeWorkspace names a workspace for messages: its path if known.
func describeWorkspace(cluster logicalcluster.Name, path logicalcluster.Path) string {
	if path.Empty() {
		return "logical cluster " + cluster.String()
	}
	return path.String()
}

// cluster returns an engaged cluster, or an error that says why a
// workspace that binds the export is not engaged.
func (r *Reconciler) cluster(ctx context.Context, cluster logicalcluster.Name) (*Cluster, error) {
	cl, err := r.clusters.Get(ctx, cluster)
	if errors.Is(err, multicluster.ErrClusterNotFound) {
		return nil, fmt.Errorf("logical cluster %s is not engaged yet: its APIBinding to %s is new or not ready", cluster, r.opts.APIExportName)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to get logical cluster %s: %w", cluster, err)
	}
	return cl, nil
}

// install brings the admission configurations of a workspace to what ws
// needs: the validating configuration, and the mutating one (or none).
func (r *Reconciler) install(ctx context.Context, state *State, cluster logicalcluster.Name, ws *webhookconfig.Workspace, opts webhookconfig.Options) error {
	cl, err := r.cluster(ctx, cluster)
	if err != nil {
		return err
	}
	logger := log.FromContext(ctx).WithValues("workspace", ws.Path, "cluster", cluster)
	var errs []error
	if desired := webhookconfig.Validating(ws, cluster, opts); desired != nil {
		errs = append(errs, r.ensure(ctx, cl, logger, orNil(state.Configs[cluster]), desired))
	}
	if desired := webhookconfig.Mutating(ws, cluster, opts); desired != nil {
		errs = append(errs, r.ensure(ctx, cl, logger, orNil(state.Mutating[cluster]), desired))
	} else if existing := state.Mutating[cluster]; existing != nil && webhookconfig.IsManaged(existing) {
		errs = append(errs, r.remove(ctx, cl, existing))
	}
	return kerrors.NewAggregate(errs)
}

// orNil returns cfg as a client.Object, nil if it is nil.
func orNil[T client.Object](cfg T) client.Object {
	if reflect.ValueOf(cfg).IsNil() {
		return nil
	}
	return cfg
}

// webhooks returns the webhooks of a configuration.
func webhooks(cfg client.Object) any {
	switch c := cfg.(type) {
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		return c.Webhooks
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		return c.Webhooks
	}
	panic(fmt.Sprintf("not a webhook configuration: %T", cfg))
}

// setWebhooks replaces the webhooks of dst with those of src.
func setWebhooks(dst, src client.Object) {
	switch d := dst.(type) {
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		d.Webhooks = src.(*admissionregistrationv1.ValidatingWebhookConfiguration).Webhooks
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		d.Webhooks = src.(*admissionregistrationv1.MutatingWebhookConfiguration).Webhooks
	}
}

// kindOf names the kind of a configuration in messages.
func kindOf(cfg client.Object) string {
	if _, ok := cfg.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
		return "MutatingWebhookConfiguration"
	}
	return "ValidatingWebhookConfiguration"
}

// ensure makes the configuration existing (nil: the cache has none) what
// desired is, in one write: a create if there is none, else a merge patch
// that replaces its webhooks with the desired ones and sets the controller's
// labels and annotations, leaving others' labels and annotations alone. A
// configuration that is up to date is not written. The create fails if one
// of that name exists that the cache has not seen yet; one the controller
// does not manage is reported, not taken over.
func (r *Reconciler) ensure(ctx context.Context, cl *Cluster, logger logr.Logger, existing, desired client.Object) error {
	kind := kindOf(desired)
	if existing == nil {
		switch err := cl.Client.Create(ctx, desired, client.FieldOwner(FieldOwner)); {
		case err == nil:
			logger.Info("Installed webhook configuration", "kind", kind)
			return nil
		case apierrors.IsAlreadyExists(err):
			existing = desired.DeepCopyObject().(client.Object)
			if err := cl.Live.Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, existing); err != nil {
				return fmt.Errorf("failed to get %s %s: %w", kind, webhookconfig.Name, err)
			}
		default:
			return r.writeError(kind, err)
		}
	}
	if !webhookconfig.IsManaged(existing) {
		return fmt.Errorf("a %s named %q exists that is not managed by the %s (label %s=%s missing); rename or delete it",
			kind, webhookconfig.Name, ControllerName, webhookconfig.ManagedByLabel, webhookconfig.ManagedByValue)
	}
	if webhookconfig.UpToDate(existing, desired, webhooks(existing), webhooks(desired)) {
		return nil
	}
	updated := existing.DeepCopyObject().(client.Object)
	setWebhooks(updated, desired)
	updated.SetLabels(merged(updated.GetLabels(), desired.GetLabels()))
	updated.SetAnnotations(merged(updated.GetAnnotations(), desired.GetAnnotations()))
	if err := cl.Client.Patch(ctx, updated, client.MergeFrom(existing), client.FieldOwner(FieldOwner)); err != nil {
		return r.writeError(kind, err)
	}
	logger.Info("Updated webhook configuration", "kind", kind)
	return nil
}

// merged returns a with the entries of b set.
func merged(a, b map[string]string) map[string]string {
	if len(b) == 0 {
		return a
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// remove deletes a managed configuration, if it is still the object that
// was read.
func (r *Reconciler) remove(ctx context.Context, cl *Cluster, cfg client.Object) error {
	uid := cfg.GetUID()
	if err := cl.Client.Delete(ctx, cfg, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete the %s in logical cluster %s: %w", kindOf(cfg), logicalcluster.From(cfg), err)
	}
	log.FromContext(ctx).Info("Removed webhook configuration: nothing in the workspace needs it any more",
		"kind", kindOf(cfg), "cluster", logicalcluster.From(cfg), "workspace", cfg.GetAnnotations()[webhookconfig.WorkspacePathAnnotation])
	return nil
}

// writeError describes a failed write of a webhook configuration.
func (r *Reconciler) writeError(kind string, err error) error {
	if apierrors.IsForbidden(err) {
		resource := strings.ToLower(kind) + "s"
		err = fmt.Errorf("%w (has the workspace's APIBinding to %s accepted the permission claim on %s? See docs/operations.md, \"Upgrading and uninstalling\")", err, r.opts.APIExportName, resource)
	}
	return fmt.Errorf("failed to write %s %s: %w", kind, webhookconfig.Name, err)
}

// prune deletes managed configurations in workspaces that need none any
// more (a workspace that needs a validating configuration but no mutating
// one loses that in install). A configuration installed for a path that
// failed to resolve in this reconcile is kept: it may still be the right
// one. Reconcile has proven the state complete before anything that guards
// a resource is deleted.
func (r *Reconciler) prune(ctx context.Context, state *State, desired map[logicalcluster.Name]*webhookconfig.Workspace, unresolved map[string]error) error {
	var errs []error
	stale := func(cfg client.Object) bool {
		_, needed := desired[logicalcluster.From(cfg)]
		_, kept := unresolved[cfg.GetAnnotations()[webhookconfig.WorkspacePathAnnotation]]
		return !needed && !kept && webhookconfig.IsManaged(cfg)
	}
	var configs []client.Object
	for _, cluster := range slices.Sorted(maps.Keys(state.Configs)) {
		configs = append(configs, state.Configs[cluster])
	}
	for _, cluster := range slices.Sorted(maps.Keys(state.Mutating)) {
		configs = append(configs, state.Mutating[cluster])
	}
	for _, cfg := range configs {
		if !stale(cfg) {
			continue
		}
		cl, err := r.clusters.Get(ctx, logicalcluster.From(cfg))
		if errors.Is(err, multicluster.ErrClusterNotFound) {
			continue // disengaged since it was read: the binding is gone
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to get logical cluster %s: %w", logicalcluster.From(cfg), err))
			continue
		}
		errs = append(errs, r.remove(ctx, cl, cfg))
	}
	return kerrors.NewAggregate(errs)
}

// controllerConditions are the condition types that the controller owns.
var controllerConditions = []string{
	depv1alpha1.ConditionReady, depv1alpha1.ConditionTargetsResolved, depv1alpha1.ConditionWebhooksInstalled, depv1alpha1.ConditionDependencyCycle,
	depv1alpha1.ConditionKCPVersionTested,
}

// updateStatus applies the controller's part of status, the rule's status
// as computeStatus computed it, if it changed, then records events for
// conditions that turned bad.
func (r *Reconciler) updateStatus(ctx context.Context, rule *depv1alpha1.DependencyRule, status depv1alpha1.DependencyRuleStatus) error {
	key := kcp.KeyOf(rule)
	if equality.Semantic.DeepEqual(rule.Status, status) {
		return nil
	}
	cl, err := r.cluster(ctx, key.Cluster)
	if err != nil {
		return fmt.Errorf("failed to update the status of DependencyRule %s: %w", key, err)
	}
	own := make([]metav1.Condition, 0, len(controllerConditions))
	for _, t := range controllerConditions {
		if c := meta.FindStatusCondition(status.Conditions, t); c != nil {
			own = append(own, *c)
		}
	}
	ac := rulestatus.Apply(rule.Name, rule.UID,
		depac.DependencyRuleStatus().WithObservedGeneration(status.ObservedGeneration).WithDependencyCount(status.DependencyCount), own...)
	if err := cl.Client.Status().Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile
		}
		return fmt.Errorf("failed to update the status of DependencyRule %s: %w", key, err)
	}
	recordTransitions(cl, rule, status)
	return nil
}

// recordTransitions records an event for every condition that changed into a
// state worth telling the rule's owner about: a warning for each failure and
// for a cycle, and a normal event when protection becomes active.
func recordTransitions(cl *Cluster, rule *depv1alpha1.DependencyRule, status depv1alpha1.DependencyRuleStatus) {
	for _, c := range status.Conditions {
		before := meta.FindStatusCondition(rule.Status.Conditions, c.Type)
		if before != nil && before.Status == c.Status && before.Message == c.Message {
			continue
		}
		eventType, reason := corev1.EventTypeWarning, ""
		switch {
		case c.Type == depv1alpha1.ConditionReady && c.Status == metav1.ConditionTrue:
			eventType, reason = corev1.EventTypeNormal, EventReasonProtecting
		case c.Type == depv1alpha1.ConditionTargetsResolved && c.Status == metav1.ConditionFalse:
			reason = EventReasonResolutionFailed
		case c.Type == depv1alpha1.ConditionWebhooksInstalled && c.Reason == depv1alpha1.ReasonInstallFailed:
			reason = EventReasonInstallFailed
		case c.Type == depv1alpha1.ConditionDependencyCycle && c.Status == metav1.ConditionTrue:
			reason = EventReasonCycleDetected
		default:
			continue
		}
		cl.Recorder.Eventf(rule, nil, eventType, reason, "Reconcile", "%s", c.Message)
	}
}
