// Package guard is the admission handler that guards the webhook's records
// of deferred deletions on protected objects (the RecordGuard: only the
// webhook itself may set or change them), and the webhook's own identity as
// kcp authenticates its credentials (SelfReview). Package webhook serves it
// and routes to it.
package guard
