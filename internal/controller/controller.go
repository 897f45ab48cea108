package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/depgraph"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "dependency-controller"

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
}

// EventRecorderFunc returns the event recorder for a logical cluster.
type EventRecorderFunc func(ctx context.Context, cluster logicalcluster.Name) (events.EventRecorder, error)

// Reconciler installs the validating webhook configuration in every
// provider workspace whose resources a DependencyRule protects, removes it
// from workspaces where nothing is protected any more, and reports the
// outcome in the status of every rule.
//
// It has a single work item: every event (on rules, on webhook
// configurations, on APIBindings) and the periodic resync reconcile the
// complete state. Each reconcile observes all rules and all configurations it
// manages, so the desired state is computed from what is in kcp, never from
// memory: rules deleted while the controller was down, or configurations
// edited by someone else, are corrected on the next reconcile. No finalizer
// is needed on rules for the same reason.
type Reconciler struct {
	observer Observer
	recorder EventRecorderFunc
	opts     Options
}

// NewReconciler returns a Reconciler that reads the state with observer and
// records events with recorder.
func NewReconciler(observer Observer, recorder EventRecorderFunc, opts Options) *Reconciler {
	return &Reconciler{observer: observer, recorder: recorder, opts: opts}
}

// Reconcile implements mcreconcile.Reconciler. The request is ignored: see
// Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, _ mcreconcile.Request) (reconcile.Result, error) {
	start := time.Now()
	state, err := r.observer.Observe(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.reconcile(ctx, state); err != nil {
		if isOnlyConflicts(err) {
			// The webhook wrote a rule's status meanwhile; compute it again
			// from the new version soon, without reporting an error.
			log.FromContext(ctx).V(1).Info("A rule changed while its status was written; reconciling again", "reason", err)
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		return reconcile.Result{}, err
	}
	log.FromContext(ctx).V(1).Info("Reconciled", "rules", len(state.Rules), "duration", time.Since(start))
	return reconcile.Result{RequeueAfter: r.opts.ResyncPeriod}, nil
}

// isOnlyConflicts reports whether err consists of optimistic locking
// conflicts only.
func isOnlyConflicts(err error) bool {
	var agg kerrors.Aggregate
	if !errors.As(err, &agg) {
		return apierrors.IsConflict(err)
	}
	for _, e := range agg.Errors() {
		if !apierrors.IsConflict(e) {
			return false
		}
	}
	return true
}

// reconcile brings kcp to the desired state computed from state.
func (r *Reconciler) reconcile(ctx context.Context, state *State) error {
	webhookOpts := r.opts.Webhook()
	desired, unresolved := webhookconfig.Desired(state.Rules, state.Workspaces)
	res := results{installed: make(map[logicalcluster.Name]error, len(desired)), unresolved: map[string]error{}}
	var errs []error
	for _, p := range unresolved {
		err := fmt.Errorf("no workspace at %s binds the APIExport %s: the workspace does not exist, or it has not bound the export (bind it and accept its permission claims)",
			p, r.opts.APIExportName)
		res.unresolved[p.String()] = err
		errs = append(errs, fmt.Errorf("%s: %w", p, err))
	}
	for _, cluster := range slices.Sorted(maps.Keys(desired)) {
		ws := desired[cluster]
		err := r.install(ctx, state, cluster, ws, webhookOpts)
		res.installed[cluster] = err
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", describeWorkspace(cluster, ws.Path), err))
		}
	}
	if err := r.prune(ctx, state, desired, res.unresolved); err != nil {
		errs = append(errs, err)
	}

	cycles := depgraph.Build(state.Rules).CyclesByRule()
	for i := range state.Rules {
		rule := &state.Rules[i]
		if err := r.updateStatus(ctx, state, rule, res, cycles[kcp.KeyOf(rule)]); err != nil {
			errs = append(errs, err)
		}
	}
	return kerrors.NewAggregate(errs)
}

// describeWorkspace names a workspace for messages: its path if known.
func describeWorkspace(cluster logicalcluster.Name, path logicalcluster.Path) string {
	if path.Empty() {
		return "logical cluster " + cluster.String()
	}
	return path.String()
}

// install creates or updates the webhook configuration of a workspace.
func (r *Reconciler) install(ctx context.Context, state *State, cluster logicalcluster.Name, ws *webhookconfig.Workspace, opts webhookconfig.Options) error {
	logger := log.FromContext(ctx).WithValues("workspace", ws.Path, "cluster", cluster)
	c, ok := state.Clients[cluster]
	if !ok {
		return fmt.Errorf("logical cluster %s does not bind the APIExport %s", cluster, r.opts.APIExportName)
	}
	desired := webhookconfig.Build(ws, cluster, opts)
	existing := state.Configs[cluster]
	var err error
	switch {
	case existing == nil:
		err = c.Create(ctx, desired)
		if apierrors.IsAlreadyExists(err) {
			err = fmt.Errorf("a ValidatingWebhookConfiguration named %q exists that is not managed by the %s (label %s=%s missing); rename or delete it",
				webhookconfig.Name, ControllerName, webhookconfig.ManagedByLabel, webhookconfig.ManagedByValue)
		} else if err == nil {
			logger.Info("Installed webhook configuration", "protected", webhookconfig.Describe(ws.Protected), "dependents", webhookconfig.Describe(ws.Dependents))
		}
	case webhookconfig.NeedsUpdate(existing, desired):
		err = c.Update(ctx, webhookconfig.Merge(existing, desired))
		if err == nil {
			logger.Info("Updated webhook configuration", "protected", webhookconfig.Describe(ws.Protected), "dependents", webhookconfig.Describe(ws.Dependents))
		}
	}
	if err != nil {
		if apierrors.IsForbidden(err) {
			err = fmt.Errorf("%w (has the workspace's APIBinding to %s accepted the permission claim on validatingwebhookconfigurations?)", err, r.opts.APIExportName)
		}
		return fmt.Errorf("failed to write ValidatingWebhookConfiguration %s: %w", webhookconfig.Name, err)
	}
	return nil
}

// prune deletes managed webhook configurations in workspaces that need none
// any more. A configuration installed for a path that failed to resolve in
// this reconcile is kept: it may still be the right one.
func (r *Reconciler) prune(ctx context.Context, state *State, desired map[logicalcluster.Name]*webhookconfig.Workspace, unresolved map[string]error) error {
	var errs []error
	for cluster, cfg := range state.Configs {
		if _, ok := desired[cluster]; ok {
			continue
		}
		if _, ok := unresolved[cfg.Annotations[webhookconfig.WorkspacePathAnnotation]]; ok {
			continue
		}
		c, ok := state.Clients[cluster]
		if !ok {
			continue // listed through a binding, so bound; only possible if the binding went away in between
		}
		if err := c.Delete(ctx, cfg, client.Preconditions{UID: &cfg.UID}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("failed to delete the webhook configuration in logical cluster %s: %w", cluster, err))
			continue
		}
		log.FromContext(ctx).Info("Removed webhook configuration: nothing in the workspace is protected or guarded any more",
			"cluster", cluster, "workspace", cfg.Annotations[webhookconfig.WorkspacePathAnnotation])
	}
	return kerrors.NewAggregate(errs)
}

// updateStatus writes the rule's status if it changed, then records events
// for conditions that turned bad.
func (r *Reconciler) updateStatus(ctx context.Context, state *State, rule *depv1alpha1.DependencyRule, res results, cycles []depgraph.Cycle) error {
	key := kcp.KeyOf(rule)
	status := computeStatus(rule, state.Workspaces, res, cycles)
	if equality.Semantic.DeepEqual(rule.Status, status) {
		return nil
	}
	c, ok := state.Clients[key.Cluster]
	if !ok {
		return fmt.Errorf("no client for the workspace of rule %s", key)
	}
	updated := rule.DeepCopy()
	updated.Status = status
	// Optimistic locking: the webhook writes the DependentsIndexed
	// condition, which a patch from an older read would drop.
	if err := c.Status().Patch(ctx, updated, client.MergeFromWithOptions(rule, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile
		}
		return fmt.Errorf("failed to update the status of DependencyRule %s: %w", key, err)
	}
	r.recordTransitions(ctx, rule, status)
	return nil
}

// recordTransitions records an event for every condition that changed into a
// state worth telling the rule's owner about: a warning for each failure and
// for a cycle, and a normal event when protection becomes active.
func (r *Reconciler) recordTransitions(ctx context.Context, rule *depv1alpha1.DependencyRule, status depv1alpha1.DependencyRuleStatus) {
	var recorder events.EventRecorder
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
		case c.Type == depv1alpha1.ConditionWebhooksInstalled && c.Reason == ReasonInstallFailed:
			reason = EventReasonInstallFailed
		case c.Type == depv1alpha1.ConditionDependencyCycle && c.Status == metav1.ConditionTrue:
			reason = EventReasonCycleDetected
		default:
			continue
		}
		if recorder == nil {
			var err error
			if recorder, err = r.recorder(ctx, logicalcluster.From(rule)); err != nil {
				log.FromContext(ctx).V(1).Info("No event recorder for the workspace of the rule", "rule", kcp.KeyOf(rule), "error", err)
				return
			}
		}
		recorder.Eventf(rule, nil, eventType, reason, "Reconcile", "%s", c.Message)
	}
}
