// Package plugin is the kubectl plugin `kubectl dependencies`
// (cmd/kubectl-dependencies): it asks a workspace, before anything is
// deleted, what the dependency-controller would say and why.
//
//   - why: a server-side dry-run DELETE of one object; the webhook's answer
//     (allowed, blocked with every blocker from the denial's status
//     details, deferred under a Replay rule, or refused while a reference
//     is in flight);
//   - refs: what references an object, read from the reference labels of
//     the dependents (label-selected LISTs of every type the workspace may
//     bind), for a user who may read but not delete;
//   - order: the order in which a set of objects can be deleted without a
//     refusal, in waves, from the reference labels of the objects as
//     stored, with the cycles among them;
//   - dangling: the references to objects that do not exist, from the
//     webhook's DanglingReference Events.
//
// It follows kubectl's conventions: the kubeconfig flags of cli-runtime,
// types resolved through discovery like kubectl's (resources, short names,
// kinds, group-qualified), -o json|yaml, and exit codes like kubectl diff's:
// 0 for a clean answer, 1 when the answer is a refusal or found something,
// and 2 (ExitError) when the command failed. See docs/operations.md,
// "Asking before deleting".
package plugin
