// Package cycles decides whether kcp's teardown of namespaces or of a
// workspace may delete an object that dependents still reference, because
// the object and they reference each other in a cycle that the teardown
// deletes whole, and remembers the cycles it broke (Breaker). The DELETE
// validator (package deletion) asks it about an item of kcp's teardown that
// the index holds blockers of; it reads the index through Index, and builds
// with package teardown the graph of the objects that reference the item,
// directly or through others, and the graph's strongly connected
// components.
//
// A cycle may be broken only where every object that references an object
// of it, directly or through others, is deleted by a teardown under way:
// then deleting the objects of the cycle in any order loses no reference
// that outlives the teardown. See docs/architecture.md, "Teardown".
package cycles
