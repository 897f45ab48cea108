package registry

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/index"
)

// SourceStates tells what the index knows about a source; *index.Index
// implements it.
type SourceStates interface {
	State(src index.Source) index.State
	Changes() <-chan struct{}
}

// StatusReporter writes the DependentsIndexed condition of every registered
// rule from what the index knows about the rule's dependent type: whenever
// the index reports a change, and every interval to repair lost writes. It
// writes only a condition that differs, with optimistic locking, so that it
// never overwrites what the controller wrote meanwhile. It is a
// manager.Runnable that runs on every replica; replicas that see the same
// state write nothing.
type StatusReporter struct {
	mgr      mcmanager.Manager
	registry *Registry
	states   SourceStates
	interval time.Duration
}

// NewStatusReporter returns a StatusReporter for the rules of reg, reading
// rules through the manager's workspaces.
func NewStatusReporter(mgr mcmanager.Manager, reg *Registry, states SourceStates, interval time.Duration) *StatusReporter {
	return &StatusReporter{mgr: mgr, registry: reg, states: states, interval: interval}
}

// Start implements manager.Runnable.
func (s *StatusReporter) Start(ctx context.Context) error {
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.states.Changes():
		case <-ticker.C:
		}
		s.reportAll(ctx)
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (s *StatusReporter) NeedLeaderElection() bool {
	return false
}

func (s *StatusReporter) reportAll(ctx context.Context) {
	logger := log.FromContext(ctx).WithName("status")
	for _, r := range s.registry.Rules() {
		if err := s.report(ctx, r); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			logger.V(1).Info("Failed to report the index state on a rule", "rule", r.Key, "error", err)
		}
	}
}

// IndexedCondition returns the DependentsIndexed condition for a source in
// state.
func IndexedCondition(state index.State, generation int64) metav1.Condition {
	c := metav1.Condition{Type: depv1alpha1.ConditionDependentsIndexed, Reason: string(state.Phase), Message: state.Message, ObservedGeneration: generation}
	switch state.Phase {
	case index.PhaseSynced:
		c.Status, c.Reason = metav1.ConditionTrue, "Indexed"
	case index.PhaseSyncing:
		c.Status = metav1.ConditionUnknown
	default:
		c.Status = metav1.ConditionFalse
	}
	if c.Message == "" {
		c.Message = string(state.Phase)
	}
	return c
}

// report writes the condition of one rule if it differs.
func (s *StatusReporter) report(ctx context.Context, r *Rule) error {
	cl, err := s.mgr.GetCluster(ctx, multicluster.ClusterName(r.Key.Cluster))
	if err != nil {
		return err
	}
	c := cl.GetClient()
	rule := &depv1alpha1.DependencyRule{}
	if err := c.Get(ctx, client.ObjectKey{Name: r.Key.Name}, rule); err != nil {
		return err
	}
	if rule.UID != r.UID {
		return nil // another object of that name; the registry will see it
	}
	want := IndexedCondition(s.states.State(r.Dependent), rule.Generation)
	if have := meta.FindStatusCondition(rule.Status.Conditions, want.Type); have != nil &&
		have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message && have.ObservedGeneration == want.ObservedGeneration {
		return nil
	}
	updated := rule.DeepCopy()
	meta.SetStatusCondition(&updated.Status.Conditions, want)
	return c.Status().Patch(ctx, updated, client.MergeFromWithOptions(rule, client.MergeFromWithOptimisticLock{}))
}

// Rules returns the registered rules.
func (r *Registry) Rules() []*Rule {
	r.lock.Lock()
	defer r.lock.Unlock()
	rules := make([]*Rule, 0, len(r.records))
	for _, rec := range r.records {
		rules = append(rules, rec.rule)
	}
	return rules
}
