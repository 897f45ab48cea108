// Package client provides a ClusterClient: controller-runtime clients for kcp
// workspaces, addressed by logical cluster path or name, that share one HTTP
// transport.
//
// Only the tests and hack/localdev use it (the binaries reach workspaces
// through internal/vw and link none of it). It lives here because
// github.com/kcp-dev/multicluster-provider/envtest, which the suites use to
// start kcp, imports github.com/kcp-dev/multicluster-provider/client, a
// module the Go module proxy does not serve (every version and
// pseudo-version of it is refused). A replace directive applies to a whole
// module, tests included, so the project's go.mod replaces that module path
// with this directory. When the upstream module can be fetched, drop this
// copy and the replace directive.
package client
