// Package kcpcontract is the kcp contract suite: one small, fast spec per
// behaviour of kcp that the dependency-controller's design relies on, each
// named after the assumption and linked to the section of
// docs/architecture.md (or docs/operations.md) that depends on it. If kcp
// changes one of these behaviours, the spec of that assumption fails, naming
// what the design can no longer rely on.
//
// The assumptions:
//
//  1. A ValidatingWebhookConfiguration in an APIExport's workspace is called
//     for CREATE, UPDATE and DELETE of the bound resource in every consumer
//     workspace, with the consumer's logical cluster in the kcp.io/cluster
//     annotation of the (old) object, and its denial refuses the DELETE.
//  2. kcp evaluates the matchConditions of such a configuration on the
//     consumer's request (object, oldObject and request.operation are
//     visible); a false condition means the webhook is not called.
//  3. The items of kcp's own namespace deletion (a DeleteCollection) reach
//     DELETE admission without a request name, the name only in oldObject,
//     from system:apiserver in group system:masters.
//  4. Nothing can be created in a terminating namespace, bound resources
//     included, and a dry-run CREATE of a core Event through the provider's
//     APIExport virtual workspace (which claims events) is refused with the
//     cause NamespaceTerminating, while in an active namespace it is
//     accepted (an Event about the Namespace must name the namespace as
//     the involved object's: Kubernetes' Event validation accepts one
//     without only in default).
//  5. A DELETE that a webhook refused after changing the object is admitted
//     again on the new state (kcp's DELETE starts from the object in its
//     watch cache and, after a denial, re-reads it from etcd and admits
//     again if it changed).
//  6. A LIST without resourceVersion through an APIExport virtual workspace
//     is consistent (it lists an object created just before), and a "!="
//     label selector works there.
//  7. The APIExport virtual workspace honours the provider's grants on
//     apiexports/content (read, patch, delete separately); a merge patch
//     with a stale metadata.resourceVersion, or with another object's
//     metadata.uid (a precondition), is a 409 Conflict.
//  8. A write through the virtual workspace reaches the consumer's
//     admission as the caller's identity.
//  9. kcp presents no client certificate to a webhook.
//  10. A MutatingWebhookConfiguration in an APIExport's workspace mutates
//     bound objects in consumer workspaces, and its label changes on writes
//     through /status are discarded.
//  11. The permission claims on validatingwebhookconfigurations and
//     mutatingwebhookconfigurations let a user with apiexports/content on the
//     claiming export create them in a workspace that binds it, through the
//     export's virtual workspace.
//  12. A GET without resourceVersion through the virtual workspace returns
//     the write just made (linearizable).
//  13. A DELETE that a webhook allowed is admitted again on the new state
//     when the object changed between its admission and the commit (the
//     commit has the admitted state's revision as a precondition), and a
//     denial of that second call refuses it.
//  14. A wildcard watch with allowWatchBookmarks and timeoutSeconds through
//     the virtual workspace, of a type nobody writes, receives a bookmark
//     about 2 s before it ends, at a resourceVersion no older than that of
//     a consistent LIST (limit=1) made before the watch while only other
//     types were written. (A watch from the resourceVersion the watch cache
//     is at gets none until the cache learns of a newer one, as a consistent
//     LIST makes it.)
//  15. Concurrent merge patches of different annotation keys of one object,
//     without metadata.resourceVersion, are all stored when sent to the
//     workspace; through the virtual workspace, which turns a patch into a
//     GET and an UPDATE and retries a conflict only a few times, each is
//     either stored or answered 409 Conflict, never lost. (A stale
//     metadata.resourceVersion in the patch is a 409: see 7.)
//  16. A dry-run merge PATCH through the virtual workspace runs the mutating
//     webhooks of the APIExport's workspace, with dryRun in the review, and
//     answers with the mutated object, storing nothing.
//  17. A SelfSubjectAccessReview in the provider's workspace of patch on
//     apiexports/content of the export is allowed exactly when a merge
//     patch through the virtual workspace is; a user without the
//     workspace's access verb may do neither.
//  18. Match conditions with CEL's optional field selection,
//     object.?metadata.?annotations[?"k"].hasValue() and
//     object.?metadata.?annotations[?"k"] != oldObject.?metadata.?annotations[?"k"],
//     evaluate without error whether annotations or labels are absent, {}
//     or null, and on a CREATE (no oldObject) or DELETE (no object); a plain
//     `in` on null annotations, or has() on a DELETE's object, errors, which
//     refuses the write when the webhook fails closed.
//  19. A workspace's namespace default cannot be deleted while the
//     workspace stays; once the workspace is being deleted, kcp deletes its
//     namespaces, default included (a dry-run Event there through the
//     provider's virtual workspace is then refused with the cause
//     NamespaceTerminating), and the bound objects in them.
//  20. The status details of a webhook's denial of a DELETE (name, group,
//     kind and causes) reach the client unchanged.
//  21. A server-side apply of labels null or {} passes labels null to the
//     mutating webhooks (annotations applied so reach them holding only
//     kcp.io/cluster; a manager dropping its last label and annotation, or
//     a merge patch of null, leaves both absent); on null labels object.?metadata.?labels.orValue({}) is null
//     and iterating over it errors, while
//     object.?metadata.?labels.optFlatMap(m, optional.ofNonZeroValue(m)).orValue({})
//     is {} on every shape. kcp sets the object's kcp.io/cluster only on a
//     CREATE: an UPDATE's object carries what the request made of it (none
//     after such a drop, or another workspace's name, which is admitted),
//     while its oldObject carries the workspace's, which stays stored.
//  22. The APIExport virtual workspace serves a SubjectAccessReview in a
//     consumer workspace that accepted the export's claim on
//     subjectaccessreviews, to a user with create on apiexports/content of
//     the export, and the workspace answers it as it authorizes the user the
//     review names (allowed for one who may delete, not for one who may
//     only update, nor for one without the workspace's access verb); in a
//     workspace that did not accept the claim it is refused with 403.
//  23. The APIExport virtual workspace refuses alike, with 403 and the
//     reason "access denied", a request for a workspace that does not bind
//     the export and a request by a user without the provider's grant; a
//     wildcard LIST of APIBindings through it lists the bindings of the
//     export in every workspace, and only those, to a user with list on the
//     export's content, and refuses it to one without.
//
// kcp may admit one UPDATE or DELETE more than once: it starts from the
// object in its watch cache and, when that was stale, admits again on the
// stored object. The specs accept repeated calls and check that the last
// one is on the stored state.
//
// The specs share one provider workspace and two consumer workspaces, in an
// Ordered container that continues after a failure, so that every
// assumption is reported on its own.
//
// The suite starts its own kcp with test/kcpenv from the binaries in the
// directory named by KCP_BIN_DIR (kcpenv.BinDirEnv; bin/ of the repository
// when unset, which `make kcp` fills with the pinned build), and says which
// kcp it is. It deploys nothing of the project: the webhook is a recorder
// inside the test that records every AdmissionReview and answers as each
// spec programs it. It is meant to be run against any kcp build an operator
// has, before running the dependency-controller on it:
//
//	make test-contract KCP_BIN_DIR=/path/to/kcp/bin
package kcpcontract
