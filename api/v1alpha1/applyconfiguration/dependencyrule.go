// Package applyconfiguration holds the server-side apply configuration of a
// DependencyRule's status, with which the controller and the webhook each
// apply their own conditions under their own field manager: conditions are a
// list map keyed by type, so that kcp tracks every condition's owner and
// neither process removes or overwrites the other's.
//
// It is written by hand in the shape that client-go's applyconfiguration-gen
// gives apply configurations, and covers only what the project applies: the
// status. The status subresource ignores everything else but the name.
package applyconfiguration

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// DependencyRuleApplyConfiguration is a declarative configuration of a
// DependencyRule for server-side apply.
type DependencyRuleApplyConfiguration struct {
	metav1ac.TypeMetaApplyConfiguration    `json:",inline"`
	*metav1ac.ObjectMetaApplyConfiguration `json:"metadata,omitempty"`
	// Status is the part of the status to apply.
	Status *DependencyRuleStatusApplyConfiguration `json:"status,omitempty"`
}

// DependencyRule returns the apply configuration of the DependencyRule
// named name, with its kind and API version set.
func DependencyRule(name string) *DependencyRuleApplyConfiguration {
	b := &DependencyRuleApplyConfiguration{ObjectMetaApplyConfiguration: &metav1ac.ObjectMetaApplyConfiguration{}}
	b.WithName(name)
	b.WithKind("DependencyRule")
	b.WithAPIVersion(depv1alpha1.GroupVersion.String())
	return b
}

// IsApplyConfiguration implements runtime.ApplyConfiguration.
func (b DependencyRuleApplyConfiguration) IsApplyConfiguration() {}

// WithUID sets the UID and returns the receiver. The apply then fails
// instead of changing an object of the same name with another UID: one that
// replaced the object the status was computed for.
func (b *DependencyRuleApplyConfiguration) WithUID(value types.UID) *DependencyRuleApplyConfiguration {
	b.UID = &value
	return b
}

// WithStatus sets the status to apply and returns the receiver.
func (b *DependencyRuleApplyConfiguration) WithStatus(value *DependencyRuleStatusApplyConfiguration) *DependencyRuleApplyConfiguration {
	b.Status = value
	return b
}

// GetName returns the name; the client needs it to address the object.
func (b *DependencyRuleApplyConfiguration) GetName() *string {
	return b.Name
}

// GetNamespace returns nil: DependencyRules are cluster-scoped.
func (b *DependencyRuleApplyConfiguration) GetNamespace() *string {
	return b.Namespace
}

// GetKind returns the kind.
func (b *DependencyRuleApplyConfiguration) GetKind() *string {
	return b.Kind
}

// GetAPIVersion returns the API version.
func (b *DependencyRuleApplyConfiguration) GetAPIVersion() *string {
	return b.APIVersion
}

// DependencyRuleStatusApplyConfiguration is a declarative configuration of a
// DependencyRuleStatus for server-side apply: the fields that are set are
// the fields the applying field manager owns.
type DependencyRuleStatusApplyConfiguration struct {
	// ObservedGeneration is DependencyRuleStatus.ObservedGeneration.
	ObservedGeneration *int64 `json:"observedGeneration,omitempty"`
	// DependencyCount is DependencyRuleStatus.DependencyCount.
	DependencyCount *int32 `json:"dependencyCount,omitempty"`
	// Conditions are the conditions the field manager owns.
	Conditions []metav1ac.ConditionApplyConfiguration `json:"conditions,omitempty"`
}

// DependencyRuleStatus returns an empty status apply configuration.
func DependencyRuleStatus() *DependencyRuleStatusApplyConfiguration {
	return &DependencyRuleStatusApplyConfiguration{}
}

// WithObservedGeneration sets ObservedGeneration and returns the receiver.
func (b *DependencyRuleStatusApplyConfiguration) WithObservedGeneration(value int64) *DependencyRuleStatusApplyConfiguration {
	b.ObservedGeneration = &value
	return b
}

// WithDependencyCount sets DependencyCount and returns the receiver.
func (b *DependencyRuleStatusApplyConfiguration) WithDependencyCount(value int32) *DependencyRuleStatusApplyConfiguration {
	b.DependencyCount = &value
	return b
}

// WithConditions adds conditions, each with every field of c set, and
// returns the receiver.
func (b *DependencyRuleStatusApplyConfiguration) WithConditions(conditions ...metav1.Condition) *DependencyRuleStatusApplyConfiguration {
	for _, c := range conditions {
		b.Conditions = append(b.Conditions, *metav1ac.Condition().
			WithType(c.Type).
			WithStatus(c.Status).
			WithObservedGeneration(c.ObservedGeneration).
			WithLastTransitionTime(c.LastTransitionTime).
			WithReason(c.Reason).
			WithMessage(c.Message))
	}
	return b
}
