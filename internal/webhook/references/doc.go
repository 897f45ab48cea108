// Package references is the admission handlers that kcp calls for CREATE
// and UPDATE requests on dependents: the ReferenceValidator, which refuses
// a new reference to an object that is being deleted (or whose deletion is
// deferred), and the LabelMutator, which sets the reference labels of a
// dependent to what the rules of its type make of it. Package webhook
// serves them and routes to them.
package references
