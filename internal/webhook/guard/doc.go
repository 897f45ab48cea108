// Package guard is the admission handlers that guard what the webhook
// writes on protected objects, and the webhook's own identity as kcp
// authenticates its credentials (SelfReview): the RecordGuard (only the
// webhook itself may set or change the records of deferred deletions), the
// LedgerGuard (the ledger of admitted references stays as the webhook wrote
// it) and the SkipGuard (skip-protection takes effect only when set by a
// user whom kcp allows to delete the object, and the record of who set it
// stays as the guard wrote it). Package webhook serves them and routes to
// them.
package guard
