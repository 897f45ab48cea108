// Package kcp holds the kcp plumbing that the controller and the webhook
// share: parsing workspace URLs, the key of an object across logical
// clusters, the multicluster manager over an APIExport's virtual workspace,
// and complete listings through that virtual workspace on every shard.
package kcp
