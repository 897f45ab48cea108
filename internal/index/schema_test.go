package index

import (
	"encoding/json"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// vmSchema is the openAPIV3Schema of a version of an APIResourceSchema.
const vmSchema = `{
  "type": "object",
  "properties": {
    "spec": {
      "type": "object",
      "properties": {
        "vpcRef": {"type": "object", "properties": {"name": {"type": "string"}}},
        "nics": {"type": "array", "items": {"type": "object", "properties": {"vpc": {"type": "string"}}}},
        "port": {"x-kubernetes-int-or-string": true},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "tags": {"type": "array", "items": {"type": "string"}}
      }
    },
    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
  }
}`

func TestWalkSchema(t *testing.T) {
	root := &apiextensionsv1.JSONSchemaProps{}
	if err := json.Unmarshal([]byte(vmSchema), root); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ path, problem string }{
		{".spec.vpcRef.name", ""},
		{".spec.nics[*].vpc", ""},
		{".spec.tags[*]", ""},
		{".spec.port", ""},
		{".spec.extra.anything.below", ""},
		{".spec.labels.owner", ""},
		{".status.whatever", ""},
		{".metadata.name", ""},
		{".metadata.labels.owner", ""},
		{".kind", ""},
		{".spec.vpcReff.name", `.spec has no field "vpcReff"`},
		{".spec.vpcRef.nme", `.spec.vpcRef has no field "nme"`},
		{".sepc.vpcRef.name", `there is no field "sepc"`},
		{".spec.vpcRef", ".spec.vpcRef is an object, not a name"},
		{".spec.nics", ".spec.nics is an array, not a name"},
		{".spec.vpcRef[*].name", ".spec.vpcRef is not a list"},
		{".spec.nics[*].name", `.spec.nics[*] has no field "name"`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			p := fieldpath.MustParse(tt.path)
			if got := walkSchema(root, p.Steps(), ""); got != tt.problem {
				t.Errorf("walkSchema(%s) = %q, want %q", tt.path, got, tt.problem)
			}
		})
	}
}
