package fieldpath

import (
	"encoding/json"
	"testing"
)

func TestSample(t *testing.T) {
	kind, group := "VPC", "net.example.io"
	tests := []struct {
		name string
		spec ReferenceSpec
		want string
	}{
		{"a name", ReferenceSpec{Path: ".spec.vpcRef.name"}, `{"spec":{"vpcRef":{"name":"probe"}}}`},
		{"in the status", ReferenceSpec{Path: "status.vpc"}, `{"status":{"vpc":"probe"}}`},
		{"in a list", ReferenceSpec{Path: ".spec.nics[*].vpcRef.name"}, `{"spec":{"nics":[{"vpcRef":{"name":"probe"}}]}}`},
		{"a list of names", ReferenceSpec{Path: ".spec.vpcs[*]"}, `{"spec":{"vpcs":["probe"]}}`},
		{"a list of lists", ReferenceSpec{Path: ".spec.groups[*][*].name"}, `{"spec":{"groups":[[{"name":"probe"}]]}}`},
		{"with a kind and a group", ReferenceSpec{Path: ".spec.refs[*].name", KindPath: "kind", Kind: kind, GroupPath: "ref.group", Group: group},
			`{"spec":{"refs":[{"kind":"VPC","name":"probe","ref":{"group":"net.example.io"}}]}}`},
		{"with a namespace, left to the dependent's", ReferenceSpec{Path: ".spec.ref.name", NamespacePath: "namespace"}, `{"spec":{"ref":{"name":"probe"}}}`},
		{"a top-level name with a kind", ReferenceSpec{Path: ".name", KindPath: "kind", Kind: kind}, `{"kind":"VPC","name":"probe"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseReference(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(r.Sample("probe"))
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != tt.want {
				t.Errorf("Sample = %s, want %s", raw, tt.want)
			}
			// The reference finds the name in its sample, and nothing else.
			got, err := r.ResolveJSON(raw)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != (Value{Name: "probe"}) {
				t.Errorf("the reference finds %v in its sample, want only probe", got)
			}
		})
	}
}
