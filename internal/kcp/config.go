package kcp

import (
	"fmt"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/kcp-dev/logicalcluster/v3"
)

const clustersPrefix = "/clusters/"

// SplitClusterURL splits a kcp URL such as https://kcp:6443/clusters/root:org
// into the server's base URL (https://kcp:6443) and the workspace path or
// logical cluster name after /clusters/ (root:org). The cluster is empty when
// the URL names none.
func SplitClusterURL(host string) (base string, cluster logicalcluster.Path, err error) {
	u, err := url.Parse(host)
	if err != nil {
		return "", logicalcluster.Path{}, fmt.Errorf("failed to parse URL %q: %w", host, err)
	}
	if u.Scheme == "" || u.Host == "" {
		return "", logicalcluster.Path{}, fmt.Errorf("URL %q must be absolute, e.g. https://kcp.example.com:6443/clusters/root", host)
	}
	i := strings.Index(u.Path, clustersPrefix)
	if i < 0 {
		return strings.TrimSuffix(host, "/"), logicalcluster.Path{}, nil
	}
	rest := strings.TrimSuffix(u.Path[i+len(clustersPrefix):], "/")
	if strings.Contains(rest, "/") {
		return "", logicalcluster.Path{}, fmt.Errorf("URL %q has a path after /clusters/%s; expected it to end with the workspace", host, rest[:strings.Index(rest, "/")])
	}
	path, ok := logicalcluster.NewValidatedPath(rest)
	if !ok {
		return "", logicalcluster.Path{}, fmt.Errorf("URL %q names an invalid workspace path %q", host, rest)
	}
	u.Path = u.Path[:i]
	u.RawPath = ""
	return strings.TrimSuffix(u.String(), "/"), path, nil
}

// WorkspaceConfig checks that cfg points at one kcp workspace, i.e. that its
// host ends with /clusters/<workspace>, and returns the base URL of the
// server and the workspace.
func WorkspaceConfig(cfg *rest.Config) (base string, workspace logicalcluster.Path, err error) {
	base, workspace, err = SplitClusterURL(cfg.Host)
	if err != nil {
		return "", logicalcluster.Path{}, err
	}
	if workspace.Empty() {
		return "", logicalcluster.Path{}, fmt.Errorf("kubeconfig server %q does not point at a kcp workspace: it must end with /clusters/<workspace path>, e.g. %s/clusters/root:dep-ctrl", cfg.Host, base)
	}
	return base, workspace, nil
}
