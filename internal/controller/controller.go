package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	for _, cluster := range slices.Sorted(maps.Keys(state.Configs)) {
		if cfg := state.Configs[cluster]; webhookconfig.IsManaged(cfg) && webhookconfig.Reduces(cfg, p.desired[cluster]) {
			return fmt.Sprintf("the webhook configuration in logical cluster %s guards resources that no rule protects any more", cluster)
		}
	}
	for _, cluster := range slices.Sorted(maps.Keys(p.desired)) {
		// A clearance the DELETE webhook starts to skip takes protection
		// away from the objects that carry it: a rule that only the caches
		// lack would change the fingerprint.
		var skipped []string
		if cfg := state.Configs[cluster]; cfg != nil {
			skipped = webhookconfig.Skipped(cfg)
		}
		for _, fp := range p.desired[cluster].Cleared {
			if !slices.Contains(skipped, fp) {
				return fmt.Sprintf("the DELETE webhook in logical cluster %s would skip objects cleared under %s", cluster, fp)
			}
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

// install creates or applies the webhook configuration of a workspace,
// unless the fields the controller owns are up to date already.
func (r *Reconciler) install(ctx context.Context, state *State, cluster logicalcluster.Name, ws *webhookconfig.Workspace, opts webhookconfig.Options) error {
	logger := log.FromContext(ctx).WithValues("workspace", ws.Path, "cluster", cluster)
	cl, err := r.cluster(ctx, cluster)
	if err != nil {
		return err
	}
	existing := state.Configs[cluster]
	if existing == nil {
		// The cache has none. A create, unlike an apply, fails if one of
		// that name exists that the cache has not seen yet, which the
		// controller might not manage.
		created := webhookconfig.Build(ws, cluster, opts)
		switch err := cl.Client.Create(ctx, created, client.FieldOwner(FieldOwner)); {
		case err == nil:
			logger.Info("Installed webhook configuration", "protected", webhookconfig.Describe(ws.Protected), "dependents", webhookconfig.Describe(ws.Dependents))
			return upgradeManagedFields(ctx, cl, created)
		case apierrors.IsAlreadyExists(err):
			existing = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := cl.Live.Get(ctx, client.ObjectKey{Name: webhookconfig.Name}, existing); err != nil {
				return fmt.Errorf("failed to get ValidatingWebhookConfiguration %s: %w", webhookconfig.Name, err)
			}
		default:
			return r.writeError(err)
		}
	}
	if !webhookconfig.IsManaged(existing) {
		return fmt.Errorf("a ValidatingWebhookConfiguration named %q exists that is not managed by the %s (label %s=%s missing); rename or delete it",
			webhookconfig.Name, ControllerName, webhookconfig.ManagedByLabel, webhookconfig.ManagedByValue)
	}
	if err := upgradeManagedFields(ctx, cl, existing); err != nil {
		return err
	}
	if patch := webhookconfig.DropSelectorPatch(existing, ws, opts); patch != nil {
		// Every DELETE reaches the webhook again; see DropSelectorPatch.
		if err := cl.Client.Patch(ctx, existing, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			return r.writeError(err)
		}
		logger.Info("Every DELETE reaches the webhook again: no protected resource of the workspace has clearances that qualify")
	}
	desired := webhookconfig.Configuration(ws, cluster, opts)
	if webhookconfig.UpToDate(existing, desired, FieldOwner) {
		return nil
	}
	if err := cl.Client.Apply(ctx, desired, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return r.writeError(err)
	}
	logger.Info("Updated webhook configuration", "protected", webhookconfig.Describe(ws.Protected), "dependents", webhookconfig.Describe(ws.Dependents), "cleared", ws.Cleared)
	return nil
}

// writeError describes a failed write of a webhook configuration.
func (r *Reconciler) writeError(err error) error {
	if apierrors.IsForbidden(err) {
		err = fmt.Errorf("%w (has the workspace's APIBinding to %s accepted the permission claim on validatingwebhookconfigurations?)", err, r.opts.APIExportName)
	}
	return fmt.Errorf("failed to write ValidatingWebhookConfiguration %s: %w", webhookconfig.Name, err)
}

// upgradeManagedFields folds what the controller owns of cfg through
// updates (its create, and what kcp's virtual workspace records of its
// applies) into what it owns through applies, so that an apply can remove
// what it omits, and updates cfg; see webhookconfig.UpgradeManagedFieldsPatch.
// A conflict (the cache is behind) is left to the next reconcile, which the
// newer version triggers: the apply goes ahead, and what it cannot remove
// yet it removes then.
func upgradeManagedFields(ctx context.Context, cl *Cluster, cfg *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	patch, err := webhookconfig.UpgradeManagedFieldsPatch(cfg, FieldOwner)
	if err != nil || patch == nil {
		return err
	}
	if err := cl.Client.Patch(ctx, cfg, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		if apierrors.IsConflict(err) {
			log.FromContext(ctx).V(1).Info("The webhook configuration changed since it was cached; upgrading its managed fields later", "cluster", logicalcluster.From(cfg))
			return nil
		}
		return fmt.Errorf("failed to upgrade the managed fields of ValidatingWebhookConfiguration %s: %w", webhookconfig.Name, err)
	}
	return nil
}

// prune deletes managed webhook configurations in workspaces that need none
// any more. A configuration installed for a path that failed to resolve in
// this reconcile is kept: it may still be the right one. Reconcile has
// proven the state complete before anything that guards a resource is
// deleted.
func (r *Reconciler) prune(ctx context.Context, state *State, desired map[logicalcluster.Name]*webhookconfig.Workspace, unresolved map[string]error) error {
	var errs []error
	for _, cluster := range slices.Sorted(maps.Keys(state.Configs)) {
		cfg := state.Configs[cluster]
		if _, ok := desired[cluster]; ok || !webhookconfig.IsManaged(cfg) {
			continue
		}
		if _, ok := unresolved[cfg.Annotations[webhookconfig.WorkspacePathAnnotation]]; ok {
			continue
		}
		cl, err := r.clusters.Get(ctx, cluster)
		if errors.Is(err, multicluster.ErrClusterNotFound) {
			continue // disengaged since it was read: the binding is gone
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("failed to get logical cluster %s: %w", cluster, err))
			continue
		}
		if err := cl.Client.Delete(ctx, cfg, client.Preconditions{UID: &cfg.UID}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("failed to delete the webhook configuration in logical cluster %s: %w", cluster, err))
			continue
		}
		log.FromContext(ctx).Info("Removed webhook configuration: nothing in the workspace is protected or guarded any more",
			"cluster", cluster, "workspace", cfg.Annotations[webhookconfig.WorkspacePathAnnotation])
	}
	return kerrors.NewAggregate(errs)
}

// controllerConditions are the condition types that the controller owns.
var controllerConditions = []string{
	depv1alpha1.ConditionReady, depv1alpha1.ConditionTargetsResolved, depv1alpha1.ConditionWebhooksInstalled, depv1alpha1.ConditionDependencyCycle,
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
		own = append(own, *meta.FindStatusCondition(status.Conditions, t))
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
