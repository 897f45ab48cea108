// Package inflight closes the race between a DELETE of an object and the
// admission of a dependent that references it, and tells when a DELETE
// needs no read at all.
//
// Admission cannot lock two objects, but the object being referenced can
// serve as the lock: kube-apiserver (and so kcp) admits a DELETE on one
// stored state of the object and deletes it with that state's revision as
// a precondition, admitting again on the new state if the object changed
// meanwhile. So while the webhook admits a write of a dependent that adds a
// reference, it first records the reference on the referenced object (a
// Mark in the object's Ledger, an annotation only the webhook may change).
// The object's DELETE then either sees the mark, or the mark's write finds
// the object gone (a reference to a missing object, which is allowed) or
// being deleted (and the dependent is refused).
//
// A mark names the admission by an id that the webhook also sets on the
// dependent (see IDs); an index that has seen a dependent with that id
// knows the reference landed. A mark that has not landed may be in flight
// for at most MaxInFlight after it was made, kcp's request timeout and a
// margin; after that, the dependent has been stored or never will be. The
// Ledger's Assess turns this into a horizon: an index that holds every
// dependent stored before the horizon holds every dependent that can
// reference the object, and a DELETE it holds no blocker of may be allowed
// without reading.
//
// The Writer records marks, one write per object at a time, so that a hot
// object with many dependents admitted at once is not a write hotspot.
package inflight
