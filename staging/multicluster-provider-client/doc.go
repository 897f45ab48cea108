// Package client provides a ClusterClient: controller-runtime clients for kcp
// workspaces, addressed by logical cluster path, that share one HTTP transport.
//
// It implements the API that github.com/kcp-dev/multicluster-provider/envtest
// expects from github.com/kcp-dev/multicluster-provider/client.
package client
