package kcp

import (
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
)

func binding(name string, annotations map[string]string) apisv1alpha2.APIBinding {
	return apisv1alpha2.APIBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

func TestWorkspaces(t *testing.T) {
	bindings := []apisv1alpha2.APIBinding{
		binding("compute", map[string]string{"kcp.io/cluster": "2x7c", "kcp.io/path": "root:org:team-a"}),
		binding("network", map[string]string{"kcp.io/cluster": "9f3k", "kcp.io/path": "root:org:team-b"}),
		binding("unnamed", map[string]string{"kcp.io/cluster": "1abc"}),
		binding("bare", nil),
	}
	if got := WorkspacePath(&bindings[0]); got != "root:org:team-a" {
		t.Errorf("WorkspacePath() = %q", got)
	}
	if got := WorkspacePath(&bindings[3]); got != "" {
		t.Errorf("WorkspacePath() of a binding without the annotation = %q", got)
	}
	want := map[string]logicalcluster.Name{"root:org:team-a": "2x7c", "root:org:team-b": "9f3k"}
	if got := Workspaces(bindings); !maps.Equal(got, want) {
		t.Errorf("Workspaces() = %v, want %v: only the bindings that record their path", got, want)
	}
	if got := Workspaces([]apisv1alpha2.APIBinding(nil)); len(got) != 0 {
		t.Errorf("Workspaces(nil) = %v", got)
	}
}
