// Package deletion is the admission handler that kcp calls for DELETE
// requests on protected resources: the Validator, the message that names
// the blockers, the breaking of cycles of references in kcp's teardown, and
// the deferral of deletions under Replay rules. Package webhook serves it
// and routes to it.
//
// The Validator finds the DependencyRules that protect the resource in the
// rule registry (package registry, which package rulesync keeps current),
// finds the dependents that reference the object in the index of
// references (package index) and, if there are none there, has the index
// read the dependents in scope live; it denies the delete while any of them
// references the object. For an item of kcp's teardown of a namespace it
// may ask whether the namespace is being deleted (see WithNamespaces), and
// under a Replay rule it records the denied delete on the object (see
// WithRecorder). Until the registry is loaded, it denies with a message to
// retry.
//
// kcp's teardowns of namespaces and workspaces may delete objects that
// reference each other in a cycle, where every object that references one
// of them goes with the teardown too (see decideTeardown, and package
// cycles, which decides, on package teardown); where a teardown waits for
// an object outside it, the denial and an Event say which (see
// WithEvents).
package deletion
