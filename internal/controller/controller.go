package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/kcp-dev/logicalcluster/v3"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/depgraph"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"
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
// complete state. Each reconcile lists all rules and all configurations it
// manages through the APIExport's virtual workspace of every shard, so the
// desired state is computed from what is in kcp, never from memory: rules
// deleted while the controller was down, or configurations edited by
// someone else, are corrected on the next reconcile. No finalizer is needed
// on rules for the same reason.
type Reconciler struct {
	local    client.Reader
	resolver *kcp.WorkspaceResolver
	recorder EventRecorderFunc
	opts     Options

	vw *kcp.VirtualWorkspaceClients
}

// NewReconciler returns a Reconciler. local reads the workspace of the
// APIExport; vwConfig carries the credentials for its virtual workspace
// (any host); resolver resolves workspace paths.
func NewReconciler(local client.Reader, vwConfig *rest.Config, resolver *kcp.WorkspaceResolver, recorder EventRecorderFunc, opts Options) (*Reconciler, error) {
	vw, err := kcp.NewVirtualWorkspaceClients(vwConfig, scheme.New(), scheme.RESTMapper())
	if err != nil {
		return nil, err
	}
	return &Reconciler{local: local, resolver: resolver, recorder: recorder, opts: opts, vw: vw}, nil
}

// observed is the state of all shards at the start of a reconcile.
type observed struct {
	rules []depv1alpha1.DependencyRule
	// the virtual workspace of the shard of every workspace that binds the
	// export, by logical cluster
	shardOf map[logicalcluster.Name]*kcp.ClusterClients
	// managed webhook configurations by logical cluster
	configs map[logicalcluster.Name]*admissionregistrationv1.ValidatingWebhookConfiguration
}

// Reconcile implements reconcile.TypedReconciler. The request is ignored:
// see Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, _ mcreconcile.Request) (reconcile.Result, error) {
	logger := log.FromContext(ctx)
	start := time.Now()

	state, err := r.observe(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}

	webhookOpts := r.opts.Webhook()
	targets := webhookconfig.Targets(state.rules)
	results := make(map[string]targetResult, len(targets))
	var errs []error
	for _, t := range targets {
		res := r.reconcileTarget(ctx, state, t, webhookOpts)
		results[t.Path.String()] = res
		if err := errors.Join(res.resolveErr, res.installErr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.Path, err))
		}
	}
	if err := r.prune(ctx, state, results); err != nil {
		errs = append(errs, err)
	}

	cycles := depgraph.Build(state.rules, webhookconfig.RuleKey).CyclesByRule()
	for i := range state.rules {
		rule := &state.rules[i]
		if err := r.updateStatus(ctx, state, rule, results, cycles[webhookconfig.RuleKey(rule)]); err != nil {
			errs = append(errs, err)
		}
	}

	logger.V(1).Info("Reconciled", "rules", len(state.rules), "workspaces", len(targets), "duration", time.Since(start), "errors", len(errs))
	if len(errs) > 0 {
		return reconcile.Result{}, kerrors.NewAggregate(errs)
	}
	return reconcile.Result{RequeueAfter: r.opts.ResyncPeriod}, nil
}

// observe lists the rules, the workspaces that bind the export, and the
// managed webhook configurations on every shard. It fails if any shard
// cannot be listed: pruning on an incomplete view could remove protection.
func (r *Reconciler) observe(ctx context.Context) (*observed, error) {
	urls, err := kcp.VirtualWorkspaceURLs(ctx, r.local, r.opts.APIExportName)
	if err != nil {
		return nil, err
	}
	state := &observed{
		shardOf: map[logicalcluster.Name]*kcp.ClusterClients{},
		configs: map[logicalcluster.Name]*admissionregistrationv1.ValidatingWebhookConfiguration{},
	}
	for _, url := range urls {
		s, err := r.vw.For(url)
		if err != nil {
			return nil, err
		}
		all, err := s.Cluster(logicalcluster.NewPath(kcp.Wildcard))
		if err != nil {
			return nil, err
		}

		bindings := &apisv1alpha2.APIBindingList{}
		if err := all.List(ctx, bindings); err != nil {
			return nil, fmt.Errorf("failed to list APIBindings through %s: %w", url, err)
		}
		for i := range bindings.Items {
			state.shardOf[logicalcluster.From(&bindings.Items[i])] = s
		}

		rules := &depv1alpha1.DependencyRuleList{}
		if err := all.List(ctx, rules); err != nil {
			return nil, fmt.Errorf("failed to list DependencyRules through %s: %w", url, err)
		}
		state.rules = append(state.rules, rules.Items...)

		configs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
		if err := all.List(ctx, configs, client.MatchingLabels{webhookconfig.ManagedByLabel: webhookconfig.ManagedByValue}); err != nil {
			return nil, fmt.Errorf("failed to list ValidatingWebhookConfigurations through %s: %w", url, err)
		}
		for i := range configs.Items {
			if c := &configs.Items[i]; c.Name == webhookconfig.Name {
				state.configs[logicalcluster.From(c)] = c
			}
		}
	}
	slices.SortFunc(state.rules, func(a, b depv1alpha1.DependencyRule) int {
		return strings.Compare(webhookconfig.RuleKey(&a), webhookconfig.RuleKey(&b))
	})
	return state, nil
}

// reconcileTarget resolves a protected workspace and creates or updates its
// webhook configuration.
func (r *Reconciler) reconcileTarget(ctx context.Context, state *observed, t webhookconfig.Target, opts webhookconfig.Options) targetResult {
	logger := log.FromContext(ctx).WithValues("workspace", t.Path)

	cluster, err := r.resolver.Resolve(ctx, t.Path)
	if err != nil {
		return targetResult{resolveErr: err}
	}
	s, bound := state.shardOf[cluster]
	if !bound {
		// The cached resolution may be stale (the workspace was recreated):
		// resolve again before giving up.
		r.resolver.Invalidate(t.Path)
		if cluster, err = r.resolver.Resolve(ctx, t.Path); err != nil {
			return targetResult{resolveErr: err}
		}
		if s, bound = state.shardOf[cluster]; !bound {
			return targetResult{cluster: cluster, installErr: fmt.Errorf(
				"the workspace (logical cluster %s) does not bind the APIExport %s; bind it and accept its permission claim on validatingwebhookconfigurations",
				cluster, r.opts.APIExportName)}
		}
	}
	logger = logger.WithValues("cluster", cluster)

	c, err := s.Cluster(cluster.Path())
	if err != nil {
		return targetResult{cluster: cluster, installErr: err}
	}
	desired := webhookconfig.Build(t, opts)
	existing := state.configs[cluster]
	switch {
	case existing == nil:
		err = c.Create(ctx, desired)
		if apierrors.IsAlreadyExists(err) {
			err = fmt.Errorf("a ValidatingWebhookConfiguration named %q exists that is not managed by the %s (label %s=%s missing); rename or delete it",
				webhookconfig.Name, ControllerName, webhookconfig.ManagedByLabel, webhookconfig.ManagedByValue)
		} else if err == nil {
			logger.Info("Installed webhook configuration", "resources", webhookconfig.Describe(t.Resources))
		}
	case webhookconfig.NeedsUpdate(existing, desired):
		err = c.Update(ctx, webhookconfig.Merge(existing, desired))
		if err == nil {
			logger.Info("Updated webhook configuration", "resources", webhookconfig.Describe(t.Resources))
		}
	}
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
			// Either the claim is not accepted, or the cluster is gone and
			// the path now resolves elsewhere.
			r.resolver.Invalidate(t.Path)
			err = fmt.Errorf("%w (has the workspace's APIBinding to %s accepted the permission claim on validatingwebhookconfigurations?)", err, r.opts.APIExportName)
		}
		return targetResult{cluster: cluster, installErr: fmt.Errorf("failed to write ValidatingWebhookConfiguration %s: %w", webhookconfig.Name, err)}
	}
	return targetResult{cluster: cluster}
}

// prune deletes managed webhook configurations in workspaces where nothing is
// protected any more. A configuration installed for a path that failed to
// resolve in this reconcile is kept: it may still be the right one.
func (r *Reconciler) prune(ctx context.Context, state *observed, results map[string]targetResult) error {
	keep := map[logicalcluster.Name]bool{}
	for path, res := range results {
		if res.cluster != "" {
			keep[res.cluster] = true
		}
		if res.resolveErr != nil {
			for cluster, cfg := range state.configs {
				if cfg.Annotations[webhookconfig.WorkspacePathAnnotation] == path {
					keep[cluster] = true
				}
			}
		}
	}

	var errs []error
	for cluster, cfg := range state.configs {
		if keep[cluster] {
			continue
		}
		logger := log.FromContext(ctx).WithValues("cluster", cluster, "workspace", cfg.Annotations[webhookconfig.WorkspacePathAnnotation])
		s, ok := state.shardOf[cluster]
		if !ok {
			continue // listed, so bound; only possible if the binding went away in between
		}
		c, err := s.Cluster(cluster.Path())
		if err == nil {
			err = c.Delete(ctx, cfg, client.Preconditions{UID: &cfg.UID})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("failed to delete the webhook configuration in logical cluster %s: %w", cluster, err))
			continue
		}
		logger.Info("Removed webhook configuration: nothing in the workspace is protected any more")
	}
	return kerrors.NewAggregate(errs)
}

// updateStatus writes the rule's status if it changed, and records events
// for conditions that turned bad.
func (r *Reconciler) updateStatus(ctx context.Context, state *observed, rule *depv1alpha1.DependencyRule, results map[string]targetResult, cycles []depgraph.Cycle) error {
	cluster := logicalcluster.From(rule)
	status := computeStatus(rule, results, cycles)
	if equality.Semantic.DeepEqual(rule.Status, status) {
		return nil
	}

	r.recordTransitions(ctx, rule, status)

	s, ok := state.shardOf[cluster]
	if !ok {
		return fmt.Errorf("no shard known for the workspace of rule %s", webhookconfig.RuleKey(rule))
	}
	c, err := s.Cluster(cluster.Path())
	if err != nil {
		return err
	}
	updated := rule.DeepCopy()
	updated.Status = status
	if err := c.Status().Patch(ctx, updated, client.MergeFrom(rule)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to update the status of DependencyRule %s: %w", webhookconfig.RuleKey(rule), err)
	}
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
				log.FromContext(ctx).V(1).Info("No event recorder for the workspace of the rule", "rule", webhookconfig.RuleKey(rule), "error", err)
				return
			}
		}
		recorder.Eventf(rule, nil, eventType, reason, "Reconcile", "%s", c.Message)
	}
}

// ClusterName converts a logical cluster name to a multicluster-runtime
// cluster name.
func ClusterName(name logicalcluster.Name) multicluster.ClusterName {
	return multicluster.ClusterName(name.String())
}
