// Package vw reaches kcp's APIExport virtual workspaces, and the front-proxy
// around them: a binary's multicluster manager over the virtual workspace of
// the APIExport that serves DependencyRules, the URLs an APIExportEndpointSlice lists (one per shard),
// controller-runtime clients per server and logical cluster that share one
// connection pool and need no discovery, complete listings of the
// DependencyRules of every shard, discovery of what an export serves, and
// streamed raw reads (lists, watches, single objects) for the webhook's hot
// path, with the classification of their errors into those worth retrying.
//
// Nothing here caches objects or decides anything; the controller, the rule
// registry and the index of dependents build on it.
package vw
