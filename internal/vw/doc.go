// Package vw reaches kcp's APIExport virtual workspaces, and the front-proxy
// around them: a binary's multicluster manager over the virtual workspace of
// the APIExport that serves DependencyRules, the URLs an
// APIExportEndpointSlice lists (one per shard), controller-runtime clients
// per server and logical cluster (ClusterClients) that share one connection
// pool and need no discovery, complete listings of the DependencyRules of
// every shard, discovery of what an export serves, and raw clients of one
// server each (Client): streamed reads (lists, watches, single objects) for
// the webhook's hot path and its few writes, with the classification of
// their errors into those worth retrying.
//
// Nothing here caches objects or decides anything; the controller, the rule
// registry, the index of dependents and the webhook's writes to objects
// build on it.
package vw
