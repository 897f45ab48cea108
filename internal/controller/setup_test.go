package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
)

// A rule's update reaches the reconciler when a condition the webhook
// writes, and the controller acts on, changes: its status or reason, and
// for the conditions whose messages Ready repeats, its message.
func TestWebhookConditionsChanged(t *testing.T) {
	rule := func(conditions ...metav1.Condition) *depv1alpha1.DependencyRule {
		return &depv1alpha1.DependencyRule{Status: depv1alpha1.DependencyRuleStatus{Conditions: conditions}}
	}
	cond := func(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message}
	}
	tracked := cond(depv1alpha1.ConditionReferencesTracked, metav1.ConditionTrue, "Tracked", "a")
	tests := []struct {
		name          string
		before, after *depv1alpha1.DependencyRule
		want          bool
	}{
		{"ReferencesTracked appears", rule(), rule(tracked), true},
		{"ReferencesTracked turns False", rule(tracked), rule(cond(depv1alpha1.ConditionReferencesTracked, metav1.ConditionFalse, "Forbidden", "a")), true},
		{"ReferencesTracked's message only", rule(tracked), rule(cond(depv1alpha1.ConditionReferencesTracked, metav1.ConditionTrue, "Tracked", "b")), false},
		{"DependentsIndexed's message", rule(cond(depv1alpha1.ConditionDependentsIndexed, metav1.ConditionTrue, "Synced", "a")),
			rule(cond(depv1alpha1.ConditionDependentsIndexed, metav1.ConditionTrue, "Synced", "b")), true},
		{"a condition the controller does not act on", rule(), rule(cond("ReferencesResolved", metav1.ConditionTrue, "Resolved", "")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := webhookConditionsChanged.Update(event.UpdateEvent{ObjectOld: tt.before, ObjectNew: tt.after}); got != tt.want {
				t.Errorf("Update = %v, want %v", got, tt.want)
			}
		})
	}
}
