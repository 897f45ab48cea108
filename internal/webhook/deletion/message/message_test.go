package message

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var vpcs = schema.GroupVersionResource{Group: "network.io", Version: "v1", Resource: "vpcs"}

func TestDeniedMessage(t *testing.T) {
	blockers := []Blocker{{Kind: "VM", Namespace: "b", Name: "x"}, {Kind: "DB", Name: "z"}, {Kind: "VM", Namespace: "a", Name: "y"}, {Kind: "VM", Namespace: "a", Name: "y", Rule: "p/other"}}
	got := Denied(vpcs.GroupResource(), "", "v", blockers, 2)
	want := `vpcs.network.io "v" is still referenced by DB/z, VM/a/y and 1 more; delete these or remove their references first`
	if got != want {
		t.Errorf("Denied() =\n  %s\nwant\n  %s", got, want)
	}
}

// A denial's details list each blocker for tools, up to a cap, and how
// many there are.
func TestDeniedDetails(t *testing.T) {
	blockers := []Blocker{
		{Kind: "DB", Name: "z", Rule: "p/db", Path: ".spec.network"},
		{Kind: "VM", Namespace: "a", Name: "y", Rule: "p/vm", Path: ".spec.vpcRef.name or .spec.nics[*].vpc"},
		{Kind: "VM", Namespace: "b", Name: "x", Rule: "p/vm", Path: ".spec.vpcRef.name"},
	}
	d := Details(vpcs.GroupResource(), "v", blockers, 2)
	if d.Name != "v" || d.Group != "network.io" || d.Kind != "vpcs" {
		t.Errorf("details name the object %s/%s %s", d.Group, d.Kind, d.Name)
	}
	want := []metav1.StatusCause{
		{Type: CauseBlocker, Message: `{"kind":"DB","name":"z","rule":"p/db","path":".spec.network"}`, Field: ".spec.network"},
		{Type: CauseBlocker, Message: `{"kind":"VM","namespace":"a","name":"y","rule":"p/vm","path":".spec.vpcRef.name or .spec.nics[*].vpc"}`, Field: ".spec.vpcRef.name or .spec.nics[*].vpc"},
		{Type: CauseBlockers, Message: "3"},
	}
	if !slices.Equal(d.Causes, want) {
		t.Errorf("causes =\n  %v\nwant\n  %v", d.Causes, want)
	}
}
