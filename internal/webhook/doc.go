// Package webhook is the admission side of the webhook binary: the
// DeletionValidator, which kcp calls for DELETE requests on protected
// resources, the ReferenceValidator, which kcp calls for CREATE and UPDATE
// requests on dependents, the Handler that routes between them, the message
// that names the blockers, their metrics, and the HTTP entry point that
// serves them (controller-runtime's admission.Webhook, with the provider
// workspace and kcp's timeout taken from the request URL).
//
// The DeletionValidator finds the DependencyRules that protect the resource
// in the rule registry (package registry, which package rulesync keeps
// current), finds the dependents that reference the object in the index of
// references (package index) and, if there are none there, has the index
// read the dependents in scope live; it denies the delete while any of them
// references the object. For an item of kcp's teardown of a namespace it
// may ask whether the namespace is being deleted (see WithNamespaces), and
// under a Replay rule it records the denied delete on the object (see
// WithRecorder). The ReferenceValidator refuses a new reference to an
// object that is being deleted. Until the registry is loaded, both deny
// with a message to retry.
package webhook
