package conditions

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	depac "github.com/opendefensecloud/dependency-controller/api/v1alpha1/applyconfiguration/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/status"
)

// LabelsFieldOwner is the field manager under which the webhook's elected
// replica applies the DependentsLabelled condition (see package relabel):
// another manager than FieldOwner, whose applies on every replica would
// otherwise remove it.
const LabelsFieldOwner = "dependency-webhook-labels"

// NewWriter returns a function that applies one condition, which
// condition computes from the rule's generation, to the status of a rule
// under fieldOwner, reading the rule through the manager's workspaces and
// writing only when the condition differs from the rule's.
func NewWriter(mgr mcmanager.Manager, fieldOwner string) func(ctx context.Context, key kcp.ObjectKey, condition func(generation int64) metav1.Condition) error {
	return func(ctx context.Context, key kcp.ObjectKey, condition func(int64) metav1.Condition) error {
		return applyOwn(ctx, mgr, key, fieldOwner, func(rule *depv1alpha1.DependencyRule) []metav1.Condition {
			return []metav1.Condition{condition(rule.Generation)}
		})
	}
}

// applyOwn reads the rule key through the manager's workspaces and applies
// the conditions that want returns for it to its status under fieldOwner,
// if any of them differs from what the rule has; want returns none to leave
// the rule alone.
func applyOwn(ctx context.Context, mgr mcmanager.Manager, key kcp.ObjectKey, fieldOwner string, want func(*depv1alpha1.DependencyRule) []metav1.Condition) error {
	cl, err := mgr.GetCluster(ctx, multicluster.ClusterName(key.Cluster))
	if err != nil {
		return err
	}
	c := cl.GetClient()
	rule := &depv1alpha1.DependencyRule{}
	if err := c.Get(ctx, client.ObjectKey{Name: key.Name}, rule); err != nil {
		return err
	}
	conditions := want(rule)
	if len(conditions) == 0 {
		return nil
	}
	conditions, changed := ownConditions(rule.Status.Conditions, conditions)
	if !changed {
		return nil
	}
	ac := status.Apply(rule.Name, rule.UID, depac.DependencyRuleStatus(), conditions...)
	if err := c.Status().Apply(ctx, ac, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("failed to apply the status of DependencyRule %s: %w", key, err)
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
