// Package webhook serves the validating admission webhook that kcp calls for
// DELETE requests on protected resources. The DeletionValidator finds the
// DependencyRules that protect the resource in a registry, lists the
// dependents in the consumer workspace through the front-proxy, and denies
// the delete while any of them references the object, naming them.
//
// The registry is filled by a Populator, which lists all rules through the
// APIExport's virtual workspace on every shard before the webhook reports
// ready, and kept current by a RuleCacheManager, a multicluster reconciler on
// DependencyRules. Until the Populator has finished, every DELETE is denied
// with a message to retry.
package webhook
