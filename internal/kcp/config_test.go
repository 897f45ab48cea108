package kcp

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestSplitClusterURL(t *testing.T) {
	tests := []struct {
		host, base, cluster, err string
	}{
		{host: "https://kcp:6443", base: "https://kcp:6443"},
		{host: "https://kcp:6443/", base: "https://kcp:6443"},
		{host: "https://kcp:6443/clusters/root", base: "https://kcp:6443", cluster: "root"},
		{host: "https://kcp:6443/clusters/root:org:dep-ctrl/", base: "https://kcp:6443", cluster: "root:org:dep-ctrl"},
		{host: "https://kcp:6443/services/apiexport/abc/dependencies.opendefense.cloud/clusters/*", base: "https://kcp:6443/services/apiexport/abc/dependencies.opendefense.cloud", cluster: "*"},
		{host: "https://kcp:6443/clusters/2x8dfj3kd9", base: "https://kcp:6443", cluster: "2x8dfj3kd9"},
		{host: "https://kcp:6443/clusters/root/api/v1", err: "has a path after /clusters/root"},
		{host: "https://kcp:6443/clusters/Root", err: "invalid workspace path"},
		{host: "kcp:6443", err: "must be absolute"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			base, cluster, err := SplitClusterURL(tt.host)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("SplitClusterURL() error = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if base != tt.base || cluster.String() != tt.cluster {
				t.Errorf("SplitClusterURL() = %q, %q; want %q, %q", base, cluster, tt.base, tt.cluster)
			}
		})
	}
}

func TestWorkspaceConfig(t *testing.T) {
	if _, _, err := WorkspaceConfig(&rest.Config{Host: "https://kcp:6443"}); err == nil || !strings.Contains(err.Error(), "does not point at a kcp workspace") {
		t.Errorf("WorkspaceConfig() without a workspace: error = %v", err)
	}
	base, ws, err := WorkspaceConfig(&rest.Config{Host: "https://kcp:6443/clusters/root:dep-ctrl"})
	if err != nil || base != "https://kcp:6443" || ws.String() != "root:dep-ctrl" {
		t.Errorf("WorkspaceConfig() = %q, %q, %v", base, ws, err)
	}
}
