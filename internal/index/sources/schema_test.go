package sources

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath/fieldpathtest"
	"github.com/opendefensecloud/dependency-controller/internal/scheme"
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
        "tags": {"type": "array", "items": {"type": "string"}},
        "anything": {}
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
		{".spec.anything.below[*]", ""},
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
		{".spec.labels.owner.name", `.spec.labels.owner has no field "name"`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			p := fieldpathtest.MustParse(tt.path)
			if got := walkSchema(root, p.Name().Steps(), ""); got != tt.problem {
				t.Errorf("walkSchema(%s) = %q, want %q", tt.path, got, tt.problem)
			}
		})
	}
}

// checkPaths reads the schema the APIExport names for the resource, in the
// version the rules name.
func TestCheckPaths(t *testing.T) {
	export := &apisv1alpha2.APIExport{
		ObjectMeta: metav1.ObjectMeta{Name: "compute.io"},
		Spec: apisv1alpha2.APIExportSpec{Resources: []apisv1alpha2.ResourceSchema{
			{Group: "network.io", Name: "virtualmachines", Schema: "v1.virtualmachines.network.io"},
			{Group: "compute.io", Name: "virtualmachines", Schema: "v2.virtualmachines.compute.io"},
			{Group: "compute.io", Name: "disks", Schema: "missing"},
		}},
	}
	ars := &apisv1alpha1.APIResourceSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "v2.virtualmachines.compute.io"},
		Spec: apisv1alpha1.APIResourceSchemaSpec{Versions: []apisv1alpha1.APIResourceVersion{
			{Name: "v1alpha1", Schema: runtime.RawExtension{Raw: []byte(`{"type":"object"}`)}},
			{Name: "v1", Schema: runtime.RawExtension{Raw: []byte(vmSchema)}},
			{Name: "v2"},
			{Name: "v3", Schema: runtime.RawExtension{Raw: []byte(`{"type":7}`)}},
		}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(export, ars).Build()
	paths := []fieldpath.Reference{fieldpathtest.MustParse(".spec.vpcRef.name"), fieldpathtest.MustParse(".spec.vpcReff.name"), fieldpathtest.MustParse(".spec.nics")}
	ctx := context.Background()

	problems, err := checkPaths(ctx, c, "compute.io", vms, paths)
	if err != nil {
		t.Fatal(err)
	}
	want := []PathProblem{{Path: paths[1].Name(), Problem: `.spec has no field "vpcReff"`}, {Path: paths[2].Name(), Problem: ".spec.nics is an array, not a name"}}
	if len(problems) != len(want) || problems[0] != want[0] || problems[1] != want[1] {
		t.Errorf("checkPaths() = %v, want %v", problems, want)
	}

	for _, tt := range []struct {
		name   string
		export string
		gvr    string
		err    string
	}{
		{"no such export", "storage.io", "v1", `failed to read the APIExport "storage.io"`},
		{"a resource the export does not name", "compute.io", "v1/things", `names no APIResourceSchema for things.compute.io`},
		{"a schema that is not there", "compute.io", "v1/disks", `failed to read the APIResourceSchema "missing"`},
		{"a version the schema does not have", "compute.io", "v9", `has no version v9`},
		{"a version without a schema", "compute.io", "v2", `has no schema for v2`},
		{"a schema that is not one", "compute.io", "v3", `failed to read the schema of v3`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gvr := vms
			version, resource, ok := strings.Cut(tt.gvr, "/")
			gvr.Version = version
			if ok {
				gvr.Resource = resource
			}
			problems, err := checkPaths(ctx, c, tt.export, gvr, paths)
			if err == nil || !strings.Contains(err.Error(), tt.err) || problems != nil {
				t.Errorf("checkPaths() = %v, %v; want an error about %q", problems, err, tt.err)
			}
		})
	}
}
