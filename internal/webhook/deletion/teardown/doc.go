// Package teardown holds what the DELETE validator and package cycles need
// to decide the items of kcp's own teardowns of namespaces and workspaces
// when objects reference each other in a cycle: the graph of the objects
// that reference an object, directly or through others (Explore), its
// strongly connected components (Graph.Component, Tarjan's algorithm),
// which objects a teardown under way deletes (Scope, from what kcp says
// about namespaces), the components broken a moment ago (Broken), and the
// resources whose objects kcp's teardowns were deleting lately (Underway,
// from the items themselves).
//
// A cycle may be broken only where every object that references an object
// of it, directly or through others, is deleted by a teardown under way:
// then deleting the objects of the cycle in any order loses no reference
// that outlives the teardown. See docs/architecture.md, "Teardown".
package teardown
