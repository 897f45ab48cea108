// Package conditions writes the webhook's conditions on DependencyRules:
// the Reporter applies DependentsIndexed and ReferencesGuarded, on every
// replica, from what the index knows about each rule's dependent and
// protected types (Indexed, Guarded); NewWriter applies any one condition
// (the relabelling's DependentsLabelled, on the elected replica). Each
// applies with server-side apply under a field manager of its own, so that
// neither removes the other's conditions nor the controller's, and writes
// only a condition that differs from what the rule has.
package conditions
