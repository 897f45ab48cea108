// Package audit finds dangling references: references that dependents
// hold to objects that do not exist. Creation order is free (a dependent
// may be created before what it references), and an object can go without
// the webhook's consent (deleted with skip-protection, by an administrator,
// or while the webhook was down, or referenced before its rule existed), so
// such references are allowed; the audit makes them visible.
//
// The webhook's index already holds every reference of every indexed
// dependent (package index). For the protected types that are not dependent
// types themselves, the Auditor has the index watch their objects (their
// cluster, namespace and name only, through the protected provider's
// APIExport virtual workspace with the read access it grants; see
// index.Index.WatchTargets), those labelled cleared left out, and for
// those that are, the index's store holds them anyway. After changes of
// the index (at most every Options.Debounce), when the grace period of a
// missing object ends, and every Options.Interval, a pass checks each
// reference of each rule against those sets: map lookups. An object that
// a reference names and its set lacks is read before the reference counts
// as missing (see Auditor.confirm): the cleared label that kept it out
// may have been set by anyone under an earlier release. A reference whose object has been missing
// for the grace period is reported:
//
//   - on each rule, the condition ReferencesResolved (True, AllResolved;
//     False, Dangling, with the number of its dangling references and a
//     few of them; Unknown while the dependents or the protected types are
//     not known completely), under a field manager of its own (FieldOwner);
//   - as the gauge dependency_webhook_dangling_references per dependent
//     type;
//   - as a Warning Event DanglingReference on the dependent, where its
//     provider's APIExport claims events: once per dangling reference, not
//     again while it stays dangling, again if it comes back after it was
//     resolved.
//
// A reference is cleared at the first pass after its object exists. The
// Auditor runs on the webhook's elected replica: only that replica watches
// the targets. What it remembers (since when each reference is missing,
// which Events it recorded) starts afresh on a newly elected replica, which
// writes no premature True meanwhile.
//
// It makes no request on the admission path, reads from kcp only objects
// that their sets lack (at most once per grace period each), and writes
// nothing on dependents.
package audit
