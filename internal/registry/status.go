package registry

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	depac "github.com/opendefensecloud/dependency-controller/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	rulestatus "github.com/opendefensecloud/dependency-controller/internal/status"
)

// SourceStates tells what the index knows about a source; *index.Index
// implements it.
type SourceStates interface {
	State(src index.Source) index.State
	Changes() <-chan struct{}
}

// FieldOwner is the field manager under which the webhook applies its
// conditions to the status of rules.
const FieldOwner = "dependency-webhook"

// StatusReporter writes the DependentsIndexed and ReferencesGuarded
// conditions of every registered rule from what the index knows about the
// rule's dependent type and its protected types: whenever the index reports
// a change, and every interval to repair lost writes. It applies exactly
// these two conditions with server-side apply under its own field manager
// (FieldOwner): conditions are a list map keyed by type, so that the
// controller's conditions, which the controller applies under its own, are
// never touched. It writes only when a condition differs from what the
// manager's cache holds. It is a manager.Runnable that runs on every
// replica; replicas that see the same state write nothing.
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
		if err := s.report(ctx, r); err != nil && !apierrors.IsNotFound(err) {
			logger.V(1).Info("Failed to report the index state on a rule", "rule", r.Key, "error", err)
		}
	}
}

// IndexedCondition returns the DependentsIndexed condition of a rule with the
// given field paths whose dependent source is in state. Its reason is that
// of depv1alpha1 for the state's phase, which is the phase's name, except
// for a synced source (ReasonIndexed) and a path not in the schema
// (ReasonFieldPathNotInSchema).
func IndexedCondition(state index.State, paths []fieldpath.Reference, generation int64) metav1.Condition {
	c := metav1.Condition{Type: depv1alpha1.ConditionDependentsIndexed, Reason: string(state.Phase), Message: state.Message, ObservedGeneration: generation}
	var problems []string
	for _, p := range state.PathProblems {
		if slices.ContainsFunc(paths, func(r fieldpath.Reference) bool { return slices.Contains(r.Paths(), p.Path) }) {
			problems = append(problems, fmt.Sprintf("%s: %s", p.Path, p.Problem))
		}
	}
	if len(problems) > 0 && state.Phase.Effective() {
		c.Status, c.Reason = metav1.ConditionFalse, depv1alpha1.ReasonFieldPathNotInSchema
		c.Message = fmt.Sprintf("the schema of %s, as its APIExport serves it, cannot hold a name at %s; the rule never finds a reference there",
			state.Kind, strings.Join(problems, "; "))
		return c
	}
	switch state.Phase {
	case index.PhaseSynced:
		c.Status, c.Reason = metav1.ConditionTrue, depv1alpha1.ReasonIndexed
	case index.PhaseSyncing:
		c.Status = metav1.ConditionUnknown
	case index.PhaseVersionNotServed:
		c.Status = metav1.ConditionFalse
		c.Message += "; deletes that the rule protects are refused in workspaces that bind the APIExport until the rule names a served version"
	default:
		c.Status = metav1.ConditionFalse
		c.Message += "; until then the rule has no effect"
	}
	if c.Message == "" {
		c.Message = string(state.Phase)
	}
	return c
}

// GuardedCondition returns the ReferencesGuarded condition of a rule with
// guard g, whose target sources are in the states that states returns. A
// target whose source is in a phase with a problem gives the condition that
// phase's name as its reason, as in IndexedCondition.
func GuardedCondition(g Guard, states func(index.Source) index.State, generation int64) metav1.Condition {
	c := metav1.Condition{Type: depv1alpha1.ConditionReferencesGuarded, ObservedGeneration: generation}
	var guarded, syncing, problems []string
	reason := ""
	seen := map[index.Source]bool{}
	for _, ref := range g.References {
		if ref.Target.Export.Name == "" || seen[ref.Target] {
			continue
		}
		seen[ref.Target] = true
		state := states(ref.Target)
		what := fmt.Sprintf("%s of the APIExport %s", ref.Target.Resource.GroupResource(), ref.Target.Export)
		switch state.Phase {
		case index.PhaseSynced:
			guarded = append(guarded, what)
		case index.PhaseSyncing:
			syncing = append(syncing, what)
		default:
			if reason == "" {
				reason = string(state.Phase)
			}
			consequence := "new references to them are not checked until then"
			if state.Phase != index.PhaseAccessDenied {
				consequence = "objects of that type are not protected by this rule"
			}
			problems = append(problems, fmt.Sprintf("%s: %s; %s", what, state.Message, consequence))
		}
	}
	switch {
	case len(problems) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, reason, strings.Join(problems, "; ")
	case len(syncing) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "Checking access to "+strings.Join(syncing, ", ")
	case len(guarded) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, depv1alpha1.ReasonTargetsUnresolved, "No protected workspace binds the dependencies APIExport yet"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, depv1alpha1.ReasonGuarded
		c.Message = "New references to objects that are being deleted are refused: " + strings.Join(guarded, ", ")
	}
	return c
}

// report applies the conditions of one rule if they differ from those in
// the manager's cache.
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
	paths := make([]fieldpath.Reference, 0, len(r.References))
	for _, ref := range r.References {
		paths = append(paths, ref.Path)
	}
	want := []metav1.Condition{IndexedCondition(s.states.State(r.Dependent), paths, rule.Generation)}
	if g, ok := s.registry.GuardOf(r.Key); ok {
		want = append(want, GuardedCondition(g, s.states.State, rule.Generation))
	}
	conditions, changed := ownConditions(rule.Status.Conditions, want)
	if !changed {
		return nil
	}
	ac := rulestatus.Apply(rule.Name, rule.UID, depac.DependencyRuleStatus(), conditions...)
	if err := c.Status().Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to apply the status of DependencyRule %s: %w", r.Key, err)
	}
	return nil
}

// ownConditions returns the conditions want as they are to be applied to a
// rule whose status has the conditions current: each keeps the last
// transition time it has in current unless its status changes. changed
// reports whether any differs from current in status, reason, message or
// observed generation, or is missing there.
func ownConditions(current, want []metav1.Condition) (conditions []metav1.Condition, changed bool) {
	merged := slices.Clone(current)
	for _, w := range want {
		if meta.SetStatusCondition(&merged, w) {
			changed = true
		}
		conditions = append(conditions, *meta.FindStatusCondition(merged, w.Type))
	}
	return conditions, changed
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

// LabelsFieldOwner is the field manager under which the webhook's elected
// replica applies the DependentsLabelled condition (see package relabel):
// another manager than FieldOwner, whose applies on every replica would
// otherwise remove it.
const LabelsFieldOwner = "dependency-webhook-labels"

// NewConditionWriter returns a function that applies one condition, which
// condition computes from the rule's generation, to the status of a rule
// under fieldOwner, reading the rule through the manager's workspaces and
// writing only when the condition differs from the rule's.
func NewConditionWriter(mgr mcmanager.Manager, fieldOwner string) func(ctx context.Context, key kcp.ObjectKey, condition func(generation int64) metav1.Condition) error {
	return func(ctx context.Context, key kcp.ObjectKey, condition func(int64) metav1.Condition) error {
		cl, err := mgr.GetCluster(ctx, multicluster.ClusterName(key.Cluster))
		if err != nil {
			return err
		}
		c := cl.GetClient()
		rule := &depv1alpha1.DependencyRule{}
		if err := c.Get(ctx, client.ObjectKey{Name: key.Name}, rule); err != nil {
			return err
		}
		conditions, changed := ownConditions(rule.Status.Conditions, []metav1.Condition{condition(rule.Generation)})
		if !changed {
			return nil
		}
		ac := rulestatus.Apply(rule.Name, rule.UID, depac.DependencyRuleStatus(), conditions...)
		if err := c.Status().Apply(ctx, ac, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("failed to apply the status of DependencyRule %s: %w", key, err)
		}
		return nil
	}
}
