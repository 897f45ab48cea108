// Package clearance clears protected objects that nothing references, so
// that kcp deletes them without calling the DELETE webhook.
//
// On the elected webhook replica, a Clearer lists the objects of every
// protected resource now and then and asks the DELETE webhook's own
// decision (deletion.Validator.Clearance) whether a DELETE of each would be
// allowed now from the object's horizon alone: every reference to it
// tracked, none in flight, and an index current past the horizon that
// holds no dependent referencing it. If so, it writes the clearance into
// the object's ledger of admitted references (inflight.Ledger.Clearance),
// with the object's resourceVersion as a precondition, so that it holds
// for exactly the state it was decided on, and labels the object cleared
// (api/v1alpha1.LabelCleared) in the same write. The DELETE webhook's
// object selector (webhookconfig.NotClearedSelector) then lets kcp delete
// the object without calling the webhook. It leaves alone the objects that a
// teardown is deleting, as its items to the webhook or kcp's answer about
// their namespace tell: they are gone a moment later.
//
// Why that is sound: only the webhook writes the ledger and the label (its
// guard keeps the stored ones on every other write and drops them from a
// CREATE), and the write that records a new reference on the object, made
// before the dependent can be stored, replaces the ledger without the
// clearance and removes the label. A DELETE is admitted on the stored
// state with its revision as a precondition, so it sees either the label
// or the reference, never both. A rule added or changed changes the
// fingerprint the selector honours; a fingerprint covers a salt that only
// readers of the rules know, so no label set before the guard took effect
// matches it; and a reference the webhook cannot record on a cleared
// object is refused (inflight.ErrMayBeCleared). See docs/architecture.md,
// "Cleared objects".
package clearance
