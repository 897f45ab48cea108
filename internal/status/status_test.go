package status

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	depac "github.com/opendefensecloud/dependency-controller/api/v1alpha1/applyconfiguration/api/v1alpha1"
)

// The apply configuration holds exactly the fields each writer owns, in the
// shape of the DependencyRule API, and no namespace.
func TestApply(t *testing.T) {
	transition := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tests := []struct {
		name       string
		status     *depac.DependencyRuleStatusApplyConfiguration
		conditions []metav1.Condition
		want       string
	}{
		{
			name:   "the controller's fields",
			status: depac.DependencyRuleStatus().WithObservedGeneration(3).WithDependencyCount(2),
			conditions: []metav1.Condition{
				{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 3, LastTransitionTime: transition, Reason: "Protecting", Message: "m"},
			},
			want: `{"kind":"DependencyRule","apiVersion":"dependencies.opendefense.cloud/v1alpha1","metadata":{"name":"r","uid":"u1"},` +
				`"status":{"observedGeneration":3,"dependencyCount":2,"conditions":[` +
				`{"type":"Ready","status":"True","observedGeneration":3,"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"Protecting","message":"m"}]}}`,
		},
		{
			name:   "conditions only, as the webhook writes them",
			status: depac.DependencyRuleStatus(),
			conditions: []metav1.Condition{
				{Type: "DependentsIndexed", Status: metav1.ConditionUnknown, LastTransitionTime: transition, Reason: "Syncing", Message: "m"},
				{Type: "ReferencesGuarded", Status: metav1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: transition, Reason: "Guarded", Message: "g"},
			},
			want: `{"kind":"DependencyRule","apiVersion":"dependencies.opendefense.cloud/v1alpha1","metadata":{"name":"r","uid":"u1"},` +
				`"status":{"conditions":[{"type":"DependentsIndexed","status":"Unknown","observedGeneration":0,"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"Syncing","message":"m"},` +
				`{"type":"ReferencesGuarded","status":"True","observedGeneration":1,"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"Guarded","message":"g"}]}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ac := Apply("r", "u1", tt.status, tt.conditions...)
			got, err := json.Marshal(ac)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("json.Marshal() =\n%s\nwant\n%s", got, tt.want)
			}
			if ac.GetNamespace() != nil {
				t.Errorf("namespace = %q, want none", *ac.GetNamespace())
			}
		})
	}
}
