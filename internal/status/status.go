// Package status holds what the controller and the webhook share in writing
// the status of DependencyRules: each applies only its own conditions with
// server-side apply under its own field owner, so that neither overwrites
// the other's.
package status

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	depac "github.com/opendefensecloud/dependency-controller/api/v1alpha1/applyconfiguration/api/v1alpha1"
)

// Apply returns the apply configuration of the status of the rule name with
// UID uid (so that the apply fails rather than write onto a rule of the
// same name that replaced it meanwhile) and status: the fields the caller
// sets on it, and conditions, each with every field set.
func Apply(name string, uid types.UID, status *depac.DependencyRuleStatusApplyConfiguration, conditions ...metav1.Condition) *depac.DependencyRuleApplyConfiguration {
	for _, c := range conditions {
		status.WithConditions(metav1ac.Condition().
			WithType(c.Type).
			WithStatus(c.Status).
			WithObservedGeneration(c.ObservedGeneration).
			WithLastTransitionTime(c.LastTransitionTime).
			WithReason(c.Reason).
			WithMessage(c.Message))
	}
	// DependencyRules are cluster-scoped: no namespace, not even an empty one.
	return (&depac.DependencyRuleApplyConfiguration{}).
		WithKind("DependencyRule").
		WithAPIVersion(depv1alpha1.GroupVersion.String()).
		WithName(name).
		WithUID(uid).
		WithStatus(status)
}
