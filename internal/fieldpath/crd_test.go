package fieldpath

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCRDValidatesWithPattern checks that the generated DependencyRule CRD
// validates fieldRef.path with exactly Pattern and MaxLength, so that every
// path kcp admits can be parsed by the webhook.
func TestCRDValidatesWithPattern(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "dependencies.opendefense.cloud_dependencyrules.yaml"))
	if err != nil {
		t.Fatalf("failed to read the generated CRD: %v", err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatalf("failed to decode the CRD: %v", err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("expected one version, got %d", len(crd.Spec.Versions))
	}

	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, field := range []string{"spec", "dependencies", "[]", "fieldRef", "path"} {
		if field == "[]" {
			schema = schema["items"].(map[string]any)
			continue
		}
		schema = schema["properties"].(map[string]any)[field].(map[string]any)
	}

	if got := schema["maxLength"]; got != float64(MaxLength) {
		t.Errorf("maxLength of fieldRef.path is %v, want %d", got, MaxLength)
	}
	validations, _ := schema["x-kubernetes-validations"].([]any)
	if len(validations) != 1 {
		t.Fatalf("expected one x-kubernetes-validations rule on fieldRef.path, got %v", validations)
	}
	rule := validations[0].(map[string]any)["rule"].(string)
	if want := "self.matches(r'" + Pattern + "')"; rule != want {
		t.Errorf("fieldRef.path is validated by\n  %s\nwant\n  %s", rule, want)
	}
}
