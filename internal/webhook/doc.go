// Package webhook is the admission side of the webhook binary: the
// DeletionValidator, an admission.Handler that kcp calls for DELETE requests
// on protected resources, the message that names the blockers, its metrics,
// and the HTTP entry point that serves it.
//
// The validator finds the DependencyRules that protect the resource in the
// rule registry (package registry, which also keeps it current), lists the
// dependents in the consumer workspace, and denies the delete while any of
// them references the object. Until the registry is loaded, every DELETE is
// denied with a message to retry.
package webhook
