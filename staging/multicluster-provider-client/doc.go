// Package client provides a ClusterClient: controller-runtime clients for kcp
// workspaces, addressed by logical cluster path or name, that share one HTTP
// transport.
//
// It is the project's only way to get a client for one workspace outside a
// multicluster manager: the controller and the webhook use it for every shard
// of an APIExport's virtual workspace (internal/kcp), and the tests for the
// front-proxy. It lives here because it implements the API that
// github.com/kcp-dev/multicluster-provider/envtest expects from
// github.com/kcp-dev/multicluster-provider/client, a module the Go module proxy
// does not serve (every version and pseudo-version of it is refused), and the
// project's go.mod replaces that module path with this directory. When the
// upstream module can be fetched, drop this copy and the replace directive.
package client
