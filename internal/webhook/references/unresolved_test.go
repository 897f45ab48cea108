package references

import (
	"slices"
	"testing"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// otherTargetSource is targetSource as another provider exports it: the
// same resource under another export.
var otherTargetSource = index.Source{Export: kcp.ObjectKey{Cluster: "other-provider", Name: targetSource.Export.Name}, Resource: targetSource.Resource}

// A reference to an object of one export is not missing where the workspace
// holds the object under another export of the same resource (it binds at
// most one of them): two providers of VPCs, each with its rule.
func TestUnresolved(t *testing.T) {
	other := otherTargetSource
	ref := func(src index.Source, namespace, name string) reference {
		return reference{target: src, namespace: namespace, name: name}
	}
	first, second := targetSource, other
	tests := []struct {
		name    string
		added   []reference
		missing []bool
		want    []string
	}{
		{name: "nothing missing", added: []reference{ref(first, "default", "vpc-a")}, missing: []bool{false}},
		{name: "missing under its only export", added: []reference{ref(first, "default", "vpc-a")}, missing: []bool{true}, want: []string{"default/vpc-a"}},
		{name: "found under the other export", added: []reference{ref(first, "default", "vpc-a"), ref(second, "default", "vpc-a")}, missing: []bool{true, false}},
		{name: "missing under both", added: []reference{ref(first, "default", "vpc-a"), ref(second, "default", "vpc-a")}, missing: []bool{true, true},
			want: []string{"default/vpc-a", "default/vpc-a"}},
		{name: "another object found under the other export", added: []reference{ref(first, "default", "vpc-a"), ref(second, "default", "vpc-b")}, missing: []bool{true, false},
			want: []string{"default/vpc-a"}},
		{name: "the object of that name in another namespace", added: []reference{ref(first, "default", "vpc-a"), ref(second, "other", "vpc-a")}, missing: []bool{true, false},
			want: []string{"default/vpc-a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, r := range unresolved(tt.added, func(i int) bool { return tt.missing[i] }) {
				got = append(got, r.namespace+"/"+r.name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("unresolved() = %v, want %v", got, tt.want)
			}
		})
	}
}

// An object missing under two exports of its resource is one warning.
func TestMissingWarningsNameAnObjectOnce(t *testing.T) {
	other := otherTargetSource
	missing := []reference{
		{target: targetSource, namespace: "default", name: "vpc-x"},
		{target: targetSource, namespace: "default", name: "vpc-y"},
		{target: other, namespace: "default", name: "vpc-x"},
	}
	got := missingWarnings("VirtualMachine", "vm-1", "default", missing, 0)
	want := []string{
		`VirtualMachine "vm-1" references vpcs "vpc-x", which does not exist; the reference is allowed`,
		`VirtualMachine "vm-1" references vpcs "vpc-y", which does not exist; the reference is allowed`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("missingWarnings() = %q, want %q", got, want)
	}
}
