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

func TestRename(t *testing.T) {
	tests := []struct {
		name string
		spec ReferenceSpec
		obj  string
		want string // "": no reference to rename
	}{
		{"a name", ReferenceSpec{Path: ".spec.vpcRef.name"}, `{"spec":{"vpcRef":{"name":"vpc-a"},"size":2}}`, `{"spec":{"size":2,"vpcRef":{"name":"probe"}}}`},
		{"the first element of a list, the other fields kept", ReferenceSpec{Path: ".status.attachments[*].vpc"},
			`{"status":{"attachments":[{"id":"a1","vpc":"vpc-a"},{"id":"a2","vpc":"vpc-b"}]}}`,
			`{"status":{"attachments":[{"id":"a1","vpc":"probe"},{"id":"a2","vpc":"vpc-b"}]}}`},
		{"past elements without the name", ReferenceSpec{Path: ".status.attachments[*].vpc"},
			`{"status":{"attachments":[{"id":"a0"},{"id":"a1","vpc":7},{"id":"a2","vpc":"vpc-b"}]}}`,
			`{"status":{"attachments":[{"id":"a0"},{"id":"a1","vpc":7},{"id":"a2","vpc":"probe"}]}}`},
		{"a list of names", ReferenceSpec{Path: ".spec.vpcs[*]"}, `{"spec":{"vpcs":["vpc-a","vpc-b"]}}`, `{"spec":{"vpcs":["probe","vpc-b"]}}`},
		{"past an element of another kind", ReferenceSpec{Path: ".spec.refs[*].name", KindPath: "kind", Kind: "VPC"},
			`{"spec":{"refs":[{"kind":"Subnet","name":"s"},{"kind":"VPC","name":"v","port":80}]}}`,
			`{"spec":{"refs":[{"kind":"Subnet","name":"s"},{"kind":"VPC","name":"probe","port":80}]}}`},
		{"only elements of another kind", ReferenceSpec{Path: ".spec.refs[*].name", KindPath: "kind", Kind: "VPC"},
			`{"spec":{"refs":[{"kind":"Subnet","name":"s"}]}}`, ""},
		{"no reference", ReferenceSpec{Path: ".status.vpc"}, `{"status":{}}`, ""},
		{"a list where a field is", ReferenceSpec{Path: ".status.vpc"}, `{"status":[{"vpc":"v"}]}`, ""},
		{"not an object", ReferenceSpec{Path: ".status.vpc"}, `[]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseReference(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, ok := r.Rename([]byte(tt.obj), "probe")
			if ok != (tt.want != "") {
				t.Fatalf("Rename = %v, %v; want a reference renamed: %v", got, ok, tt.want != "")
			}
			if !ok {
				return
			}
			raw, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != tt.want {
				t.Errorf("Rename = %s, want %s", raw, tt.want)
			}
		})
	}
}
