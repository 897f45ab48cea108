package v1alpha1

// The conditions of a DependencyRule, in DependencyRuleStatus.Conditions.
// Two processes write them, each applying only its own conditions with
// server-side apply under its own field manager: the controller writes
// Ready, TargetsResolved, WebhooksInstalled, DependencyCycle and
// KCPVersionTested, the webhook writes DependentsIndexed, ReferencesGuarded
// and DependentsLabelled.

// Condition types written by the controller.
const (
	// ConditionReady summarizes the other conditions: True when every
	// protected workspace was resolved and has its webhook installed, and
	// the webhook reports no problem with the dependent type or with what
	// the protected APIExports serve. When False, its reason and message
	// are those of the condition that is not satisfied.
	ConditionReady = "Ready"
	// ConditionTargetsResolved is True when every apiExportRef.path of the
	// rule was resolved to a logical cluster.
	ConditionTargetsResolved = "TargetsResolved"
	// ConditionWebhooksInstalled is True when the validating webhook is
	// installed in every protected provider workspace and in the rule's own
	// workspace.
	ConditionWebhooksInstalled = "WebhooksInstalled"
	// ConditionDependencyCycle is True when the types the rule connects are
	// part of a cycle of references across all rules. It is a warning and
	// does not affect Ready: objects on such a cycle can protect each other
	// from deletion, and the skip-protection annotation breaks the cycle.
	ConditionDependencyCycle = "DependencyCycle"
	// ConditionKCPVersionTested says whether the kcp the controller talks
	// to is in the range of kcp releases this release was tested with:
	// True when it is, False when it is not (a kcp behaviour the product
	// relies on may have changed: run the kcp contract suite against it, see
	// docs/operations.md, "Compatibility"), Unknown when kcp's version could
	// not be read. It is informational and does not affect Ready.
	ConditionKCPVersionTested = "KCPVersionTested"
)

// Condition types written by the webhook.
const (
	// ConditionDependentsIndexed is True when the webhook indexes the
	// dependents of the rule through the dependent's APIExport on every
	// shard, False (naming what to fix) when it cannot: the APIExport is not
	// in the rule's workspace or does not serve the dependent type, its
	// provider has not granted the webhook read access to it, or a field
	// path of the rule is not in the dependent's schema.
	ConditionDependentsIndexed = "DependentsIndexed"
	// ConditionReferencesGuarded is True when the webhook can read the
	// rule's protected objects through their APIExports, so that a dependent
	// cannot be created with (or changed to) a reference to an object that
	// is being deleted; False, naming what to fix, when it cannot: the
	// provider of a protected type has not granted the webhook read access
	// to its APIExport, or that APIExport does not serve the protected type
	// in the version the rule names (then the rule does not protect that
	// type from deletion either).
	ConditionReferencesGuarded = "ReferencesGuarded"
	// ConditionDependentsLabelled tells how far the webhook has labelled
	// the rule's dependents with what they reference (see
	// docs/architecture.md, "Reference labels"): True when every dependent
	// carries the labels of the current rules, so that a confirming read
	// lists only the dependents that may reference the object; Unknown
	// while it labels those that existed before (they are read in full
	// meanwhile); False, naming why, when the dependents cannot be
	// labelled. It does not affect Ready: unlabelled dependents are read in
	// full, as before. The controller installs the labelling webhook for a
	// type once the webhook has written this condition on its rules.
	ConditionDependentsLabelled = "DependentsLabelled"
	// ConditionReferencesTracked tells whether the webhook records every new
	// reference of the rule's dependents on the object it references before
	// the dependent is stored (see docs/architecture.md, "The fast paths, and
	// why each is sound"): True, since its lastTransitionTime, when it does
	// for every type the rule protects, so that an allowed DELETE of such an
	// object is decided from the object and the index without reading
	// dependents once nothing can be in flight; False, naming the missing
	// grant (patch on the protected provider's APIExport content) or why the
	// dependents are not labelled, when it does not. Deletes are protected
	// either way; without it they are confirmed with a live read. Written
	// by the webhook's elected replica.
	ConditionReferencesTracked = "ReferencesTracked"
	// ConditionReferencesResolved tells whether the references the rule's
	// dependents hold name objects that exist: True when every reference
	// that is older than the grace period names an existing object; False,
	// with their number and a few samples, when some do not (dangling
	// references: made to an object that was never created, or deleted
	// with skip-protection or while the webhook was down); Unknown while
	// the webhook cannot tell (it does not watch the protected types yet).
	// Written by the webhook's elected replica; it does not affect Ready.
	ConditionReferencesResolved = "ReferencesResolved"
)

// EventReasonDanglingReference is the reason of the Warning Event the
// webhook records on a dependent that references an object that does not
// exist, once the grace period has passed (where the dependent's provider
// claims events).
const EventReasonDanglingReference = "DanglingReference"

// Reasons of the conditions that the controller writes.
const (
	// ReasonResolved (TargetsResolved=True): every apiExportRef.path names a
	// workspace that binds the dependencies APIExport.
	ReasonResolved = "Resolved"
	// ReasonResolutionFailed (TargetsResolved=False, and Ready=False): an
	// apiExportRef.path names no workspace that binds the dependencies
	// APIExport.
	ReasonResolutionFailed = "ResolutionFailed"
	// ReasonInstalled (WebhooksInstalled=True): the webhook configuration is
	// in place in every workspace the rule needs it in.
	ReasonInstalled = "Installed"
	// ReasonInstallFailed (WebhooksInstalled=False, and Ready=False): the
	// webhook configuration could not be written in a workspace.
	ReasonInstallFailed = "InstallFailed"
	// ReasonTargetsUnresolved (WebhooksInstalled=False, and Ready=False): the
	// webhook configuration is missing in workspaces that could not be
	// resolved. The webhook uses it for ReferencesGuarded=Unknown when no
	// protected workspace binds the dependencies APIExport yet.
	ReasonTargetsUnresolved = "TargetsUnresolved"
	// ReasonProtecting (Ready=True): deletion protection is active in every
	// protected workspace.
	ReasonProtecting = "Protecting"
	// ReasonCycleDetected (DependencyCycle=True): the rule's types are on a
	// cycle of references.
	ReasonCycleDetected = "CycleDetected"
	// ReasonNoCycle (DependencyCycle=False): the rule's types are on no
	// cycle of references.
	ReasonNoCycle = "NoCycle"
	// ReasonTestedVersion (KCPVersionTested=True): kcp is in the tested
	// range.
	ReasonTestedVersion = "TestedVersion"
	// ReasonUntestedVersion (KCPVersionTested=False): kcp is outside the
	// tested range.
	ReasonUntestedVersion = "UntestedVersion"
	// ReasonVersionUnknown (KCPVersionTested=Unknown): kcp's version could
	// not be read, or names no kcp release.
	ReasonVersionUnknown = "VersionUnknown"
)

// Reasons of the conditions that the webhook writes. Besides these, the
// reasons of DependentsIndexed and ReferencesGuarded name the state of the
// webhook's watch of a type (see below); Ready takes them over when such a
// state means that the rule does not protect what it names.
const (
	// ReasonIndexed (DependentsIndexed=True): the webhook watches the
	// dependents of the rule.
	ReasonIndexed = "Indexed"
	// ReasonFieldPathNotInSchema (DependentsIndexed=False): a field path of
	// the rule can never hold a name in the schema of its dependent type.
	ReasonFieldPathNotInSchema = "FieldPathNotInSchema"
	// ReasonGuarded (ReferencesGuarded=True): the webhook can read every
	// protected type of the rule, and refuses new references to objects
	// that are being deleted.
	ReasonGuarded = "Guarded"
	// ReasonLabelled (DependentsLabelled=True): every dependent carries the
	// reference labels of the current rules.
	ReasonLabelled = "Labelled"
	// ReasonLabelling (DependentsLabelled=Unknown): the webhook is labelling
	// the dependents that existed before the rules, or waits for the
	// labelling webhook to be installed; the message says how many are left.
	ReasonLabelling = "Labelling"
	// ReasonNotLabellable (DependentsLabelled=False): the dependents cannot
	// be labelled (a reference lies in the status, or the rules of the type
	// name different versions); every confirming read lists them all.
	ReasonNotLabellable = "NotLabellable"
	// ReasonTracked (ReferencesTracked=True): every new reference of the
	// rule's dependents is recorded on the object it references.
	ReasonTracked = "Tracked"
	// ReasonNotLabelled (ReferencesTracked=False): the dependents are not
	// labelled (DependentsLabelled is not True), and only the labelling
	// webhook records references.
	ReasonNotLabelled = "NotLabelled"
	// ReasonAllResolved (ReferencesResolved=True): every reference names an
	// object that exists.
	ReasonAllResolved = "AllResolved"
	// ReasonDangling (ReferencesResolved=False): some references name
	// objects that do not exist.
	ReasonDangling = "Dangling"
)

// Reasons of DependentsIndexed and ReferencesGuarded that name the state of
// the webhook's watch of a type through its APIExport.
const (
	// ReasonSyncing (Unknown): the webhook is still listing the type, or
	// checking access to it.
	ReasonSyncing = "Syncing"
	// ReasonExportNotFound (False): the APIExport that the rule names for the
	// type does not exist in the workspace it names.
	ReasonExportNotFound = "ExportNotFound"
	// ReasonAccessDenied (False): the provider has not granted the webhook
	// read access to its APIExport. For a protected type this only turns off
	// the check of new references; deletes stay protected, and Ready is not
	// affected.
	ReasonAccessDenied = "AccessDenied"
	// ReasonResourceNotExported (False): the APIExport does not export the
	// resource the rule names.
	ReasonResourceNotExported = "ResourceNotExported"
	// ReasonVersionNotServed (False): the APIExport serves the resource, but
	// not in the version the rule names. For the dependent type, deletes the
	// rule protects are refused in workspaces that bind the export, since
	// they cannot be checked.
	ReasonVersionNotServed = "VersionNotServed"
)
