package applyconfiguration

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The apply configuration serializes exactly the fields that were set, in
// the shape of the DependencyRule API.
func TestDependencyRuleApplyConfigurationJSON(t *testing.T) {
	transition := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tests := []struct {
		name string
		ac   *DependencyRuleApplyConfiguration
		want string
	}{
		{
			name: "name only",
			ac:   DependencyRule("r"),
			want: `{"kind":"DependencyRule","apiVersion":"dependencies.opendefense.cloud/v1alpha1","metadata":{"name":"r"}}`,
		},
		{
			name: "status with conditions",
			ac: DependencyRule("r").WithStatus(DependencyRuleStatus().WithObservedGeneration(3).WithDependencyCount(2).WithConditions(
				metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 3, LastTransitionTime: transition, Reason: "Protecting", Message: "m"})),
			want: `{"kind":"DependencyRule","apiVersion":"dependencies.opendefense.cloud/v1alpha1","metadata":{"name":"r"},` +
				`"status":{"observedGeneration":3,"dependencyCount":2,"conditions":[` +
				`{"type":"Ready","status":"True","observedGeneration":3,"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"Protecting","message":"m"}]}}`,
		},
		{
			name: "conditions only",
			ac: DependencyRule("r").WithStatus(DependencyRuleStatus().WithConditions(
				metav1.Condition{Type: "DependentsIndexed", Status: metav1.ConditionUnknown, LastTransitionTime: transition, Reason: "Syncing", Message: "m"})),
			want: `{"kind":"DependencyRule","apiVersion":"dependencies.opendefense.cloud/v1alpha1","metadata":{"name":"r"},` +
				`"status":{"conditions":[{"type":"DependentsIndexed","status":"Unknown","observedGeneration":0,"lastTransitionTime":"2026-01-02T03:04:05Z","reason":"Syncing","message":"m"}]}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.ac)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("json.Marshal() =\n%s\nwant\n%s", got, tt.want)
			}
			if *tt.ac.GetName() != "r" || tt.ac.GetNamespace() != nil || *tt.ac.GetKind() != "DependencyRule" {
				t.Errorf("getters: name %v, namespace %v, kind %v", tt.ac.GetName(), tt.ac.GetNamespace(), tt.ac.GetKind())
			}
		})
	}
}
