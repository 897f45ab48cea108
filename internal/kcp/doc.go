// Package kcp holds the kcp plumbing that the controller and the webhook
// share: parsing workspace URLs, clients addressed by logical cluster that
// share one transport, discovery of an APIExport's virtual workspace URLs,
// and resolution of workspace paths to logical cluster names.
package kcp
