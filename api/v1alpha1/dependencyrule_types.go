package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	// AnnotationSkipProtection on a protected object, with the value
	// "true", lets its deletion pass even while dependents still reference
	// it, if it was set by a user who may delete the object: the webhook
	// asks kcp when the annotation is set, and records who set it in
	// AnnotationSkipProtectionSetBy. The webhook allows such a delete with a
	// warning and records the bypass, and who set it, in the audit log. Set
	// by anyone else, it has no effect.
	AnnotationSkipProtection = "dependencies.opendefense.cloud/skip-protection"
	// AnnotationSkipProtectionSetBy on a protected object records who set
	// AnnotationSkipProtection to "true", if that user may delete the object
	// (a SkipProtectionSetting in JSON). Only the webhook writes it, while it
	// admits the write that sets the annotation; any other write keeps the
	// stored value, and a CREATE gets none unless it sets the annotation.
	AnnotationSkipProtectionSetBy = "dependencies.opendefense.cloud/skip-protection-set-by"

	// LabelDeletionRequested on a protected object records that its
	// deletion was requested while objects still referenced it, under a rule
	// with the Replay deletion policy: the webhook deletes it once nothing
	// references it any more. Removing the label cancels the deletion.
	LabelDeletionRequested = "deletion.dependencies.opendefense.cloud/requested"
	// AnnotationDeletionRequest holds, next to LabelDeletionRequested, the
	// request that is replayed: who asked, when, and with which
	// propagation policy (a DeletionRequest in JSON).
	AnnotationDeletionRequest = "deletion.dependencies.opendefense.cloud/request"

	// LabelReferencePrefix starts the keys of the labels the webhook keeps
	// on dependents: one for every object a dependent references, under the
	// rules of its type, followed by hex digits of a hash of that object's
	// group, resource and name. The webhook's mutating admission recomputes
	// them from the object on every write, so that nobody else can set or
	// remove them; a confirming read lists the dependents that carry the key
	// of the object being deleted.
	LabelReferencePrefix = "ref.dependencies.opendefense.cloud/"
	// LabelReferencesScheme on a dependent names the scheme (a fingerprint
	// of the rules of its type) under which its reference labels were
	// computed. A dependent without it, or with another value, is read by
	// every confirming read of its type.
	LabelReferencesScheme = "dependencies.opendefense.cloud/references"
	// LabelAdmission on a dependent is the id of the admission that last
	// added references to it: the labelling webhook records that id on
	// every object the write newly references (AnnotationAdmittedReferences)
	// before the write is stored, and sets it here. A DELETE that finds the
	// id on the object to delete knows the reference is in flight until its
	// index has seen a dependent with the id. Only the webhook sets it; any
	// other value is replaced on admission.
	LabelAdmission = "dependencies.opendefense.cloud/admission"
	// AnnotationAdmittedReferences on a protected object lists the
	// references to it that the webhook admitted recently, by admission id
	// and time, and until when earlier ones were admitted (see
	// internal/inflight). The webhook writes it while it admits a dependent
	// that references the object, before that dependent is stored, so that
	// a concurrent DELETE of the object either sees the reference or runs
	// its admission again. Only the webhook may change it: other writes keep
	// the stored value.
	AnnotationAdmittedReferences = "dependencies.opendefense.cloud/admitted-references"
	// LabelCleared on a protected object is the fingerprint under which the
	// webhook cleared it (the clearance at the end of
	// AnnotationAdmittedReferences): the DELETE webhook's object selector
	// leaves out objects labelled with a current fingerprint, so kcp deletes
	// them without calling the webhook, and so does the webhook's periodic
	// listing of protected objects. The webhook sets it with the clearance
	// and removes it with every reference it records. Only the webhook may
	// change it: other writes keep the stored value, and a CREATE does not
	// keep it.
	LabelCleared = "dependencies.opendefense.cloud/cleared"
	// AnnotationProbeAnswer is never stored: the webhook sets it only in
	// its answer to a dry run of its own, with which it probes whether kcp
	// calls its labelling webhook or its guard on a shard. The value is
	// signed with a secret of the webhook (see internal/tracking, Answers),
	// so that no other admission webhook can pass for the product's.
	AnnotationProbeAnswer = "dependencies.opendefense.cloud/probe-answer"

	// FinalizerMarks is the finalizer with which releases before the
	// reference labels guarded the marks of protected objects. The
	// controller removes it from rules once (see docs/operations.md,
	// "Upgrading and uninstalling"); nothing sets it any more.
	FinalizerMarks = "dependencies.opendefense.cloud/marks"
)

// SkipProtectionSetting is who set AnnotationSkipProtection to "true" on an
// object, and when; it is stored as JSON in the
// AnnotationSkipProtectionSetBy annotation. The webhook writes it only for a
// user whom kcp allows to delete the object, as kcp answered a
// SubjectAccessReview in the object's workspace.
type SkipProtectionSetting struct {
	// User is the name of the user who set the annotation.
	User string `json:"user"`
	// SetAt is when the annotation was set.
	SetAt metav1.Time `json:"setAt"`
}

// DeletionRequest is a deletion that the webhook replays once nothing
// references the object; it is stored as JSON in the
// AnnotationDeletionRequest annotation. The webhook signs it with a key only
// it holds, bound to the object (its workspace, resource, namespace, name
// and UID), and replays only a request that verifies and has not expired.
type DeletionRequest struct {
	// User is the name of the user whose DELETE was deferred.
	User string `json:"user"`
	// RequestedAt is when the DELETE was deferred.
	RequestedAt metav1.Time `json:"requestedAt"`
	// PropagationPolicy is the propagation policy of the DELETE, empty for
	// the resource's default; the replayed DELETE uses it.
	// +optional
	PropagationPolicy *metav1.DeletionPropagation `json:"propagationPolicy,omitempty"`
	// UID is the UID of the object whose deletion was deferred: a request
	// is replayed only on that object, and the replayed DELETE carries it as
	// a precondition.
	// +optional
	UID types.UID `json:"uid,omitempty"`
	// KeyID names the key that signed the request.
	// +optional
	KeyID string `json:"keyID,omitempty"`
	// Signature is the base64 HMAC-SHA256 of the request and the object it
	// is bound to, under the key KeyID.
	// +optional
	Signature string `json:"signature,omitempty"`
}

// DeletionPolicy says what becomes of a DELETE of a protected object that
// dependents still reference.
// +kubebuilder:validation:Enum=Deny;Replay
type DeletionPolicy string

const (
	// DeletionPolicyDeny refuses the DELETE; the user deletes again once the
	// dependents are gone. This is the default.
	DeletionPolicyDeny DeletionPolicy = "Deny"
	// DeletionPolicyReplay refuses the DELETE too, so that the object's
	// provider does not start tearing it down, but records it on the object
	// (LabelDeletionRequested) and deletes the object, with the propagation
	// policy of the request, once nothing references it any more.
	DeletionPolicyReplay DeletionPolicy = "Replay"
)

// DependencyRuleSpec declares that objects of the dependent type reference
// objects of each dependency type by name, at the given field path.
//
// +kubebuilder:validation:XValidation:rule="self.dependencies.all(d, self.dependencies.exists_one(e, e.group == d.group && e.resource == d.resource && e.fieldRef.path == d.fieldRef.path))",message="dependencies must not contain two entries with the same group, resource and fieldRef.path",fieldPath=".dependencies"
type DependencyRuleSpec struct {
	// Dependent is the resource type that holds the references. It is served
	// by an APIExport in the workspace of this rule. When an object of a
	// dependency type is deleted, objects of this type are searched for
	// references to it.
	// +required
	Dependent DependentResource `json:"dependent"`

	// Dependencies are the resource types that the dependent references. An
	// object of one of these types cannot be deleted while an object of the
	// dependent type in the same workspace references it.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Dependencies []Dependency `json:"dependencies"`

	// DeletionPolicy says what becomes of a DELETE of an object that a
	// dependent of this rule still references: Deny (the default) refuses
	// it; Replay refuses it too, records it on the object, and deletes the
	// object once nothing references it any more, so that a whole stack can
	// be deleted in one command. Replay needs the protected provider's
	// consent to the webhook patching and deleting its objects.
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// DependentResource identifies the resource type holding references.
type DependentResource struct {
	// APIExportName is the name of the APIExport, in the workspace of this
	// rule, that provides the dependent resource type.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	APIExportName string `json:"apiExportName"`

	// Group is the API group of the dependent resource, e.g. compute.example.io.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Group string `json:"group"`

	// Version is the API version of the dependent resource, e.g. v1 or v1alpha1.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$')`,message="must be a Kubernetes API version such as v1, v2beta1 or v1alpha1"
	Version string `json:"version"`

	// Kind is the kind of the dependent resource, e.g. VirtualMachine. It is
	// used to name blocking objects in denial messages.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind"`

	// Resource is the plural, lowercase resource name of the dependent type,
	// e.g. virtualmachines.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Resource string `json:"resource"`
}

// Dependency identifies a protected resource type and where the dependent
// references it.
type Dependency struct {
	// APIExportRef names the APIExport that provides the protected resource
	// type. The validating webhook is installed in that APIExport's workspace.
	// +required
	APIExportRef APIExportReference `json:"apiExportRef"`

	// Group is the API group of the protected resource, e.g. network.example.io.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Group string `json:"group"`

	// Version is the API version of the protected resource, e.g. v1.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$')`,message="must be a Kubernetes API version such as v1, v2beta1 or v1alpha1"
	Version string `json:"version"`

	// Resource is the plural, lowercase resource name of the protected type,
	// e.g. vpcs.
	// +required
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Resource string `json:"resource"`

	// FieldRef is where in a dependent object the name of the protected
	// object is stored.
	// +required
	FieldRef FieldReference `json:"fieldRef"`
}

// APIExportReference points at an APIExport in a kcp workspace.
type APIExportReference struct {
	// Path is the workspace path of the APIExport's workspace, e.g.
	// root:network-provider or root:org:team:network. Paths of any depth are
	// supported.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^root(:[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="must be a workspace path: root, or root followed by ':'-separated workspace names such as root:org:network-provider"
	Path string `json:"path"`

	// Name is the name of the APIExport.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// FieldReference locates a reference in a dependent object: the name of
// the protected object and, next to it, optionally its namespace and the
// group and kind that the reference names.
//
// +kubebuilder:validation:XValidation:rule="!has(self.namespacePath) && !has(self.groupPath) && !has(self.kindPath) || !self.path.endsWith('[*]')",message="with namespacePath, groupPath or kindPath, path must end with the field that holds the name, e.g. .spec.parentRefs[*].name"
// +kubebuilder:validation:XValidation:rule="has(self.kindPath) == has(self.kind)",message="kindPath and kind go together: kind is the kind of the protected resource that kindPath must name"
// +kubebuilder:validation:XValidation:rule="!has(self.defaultKind) || has(self.kindPath)",message="defaultKind needs kindPath"
// +kubebuilder:validation:XValidation:rule="!has(self.defaultGroup) || has(self.groupPath)",message="defaultGroup needs groupPath"
type FieldReference struct {
	// Path is a dot-separated field path with an optional leading dot, e.g.
	// .spec.vpcRef.name. A segment followed by [*] fans out over the elements
	// of a list, e.g. .spec.nics[*].vpcRef.name. The field must hold the name
	// of the referenced object (a string, or a list of strings).
	// +required
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^\.?[A-Za-z0-9_-]+(\[\*\])*(\.[A-Za-z0-9_-]+(\[\*\])*)*$')`,message="must be a field path such as .spec.vpcRef.name: '.'-separated field names of letters, digits, '_' and '-', each optionally followed by [*] to fan out over a list"
	Path string `json:"path"`

	// NamespacePath is where, next to the name, a reference names the
	// namespace of the protected object: a path relative to the object that
	// holds the name, e.g. namespace for .spec.parentRefs[*].namespace. A
	// reference without it (or with an empty one) names an object in the
	// dependent's own namespace; a cluster-scoped dependent's, an object of
	// that name in any namespace. Ignored for cluster-scoped protected
	// resources. Unset: every reference is in the dependent's namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`
	NamespacePath string `json:"namespacePath,omitempty"`

	// GroupPath is where, next to the name, a reference names the API group
	// of the object it references (relative to the object that holds the
	// name, e.g. group). Only references that name the group of the
	// protected resource count. Unset: the group is not compared.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`
	GroupPath string `json:"groupPath,omitempty"`

	// DefaultGroup is the group that a reference without the group field
	// names, as the API of the dependent defines it ("" is the core group).
	// Unset: the group of the protected resource.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`
	DefaultGroup *string `json:"defaultGroup,omitempty"`

	// KindPath is where, next to the name, a reference names the kind of the
	// object it references (relative to the object that holds the name, e.g.
	// kind). Only references that name Kind count. Unset: the kind is not
	// compared.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`
	KindPath string `json:"kindPath,omitempty"`

	// Kind is the kind of the protected resource, as references name it,
	// e.g. Gateway. Required with KindPath.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	Kind string `json:"kind,omitempty"`

	// DefaultKind is the kind that a reference without the kind field names,
	// as the API of the dependent defines it. Unset: Kind.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	DefaultKind *string `json:"defaultKind,omitempty"`
}

// DependencyRuleStatus is the observed state of a DependencyRule.
type DependencyRuleStatus struct {
	// ObservedGeneration is the generation of the spec that the conditions
	// describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// DependencyCount is the number of dependencies of the observed spec.
	// +optional
	DependencyCount int32 `json:"dependencyCount,omitempty"`

	// Conditions describe the state of the rule: Ready, TargetsResolved,
	// WebhooksInstalled, DependencyCycle, DependentsIndexed and
	// ReferencesGuarded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DependencyRule declares that objects of one resource type (the dependent)
// reference objects of other resource types (the dependencies) by name. While
// such a reference exists, the referenced object cannot be deleted.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=dependencies
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Dependent",type=string,JSONPath=`.spec.dependent.kind`
// +kubebuilder:printcolumn:name="Dependencies",type=integer,JSONPath=`.status.dependencyCount`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DependencyRule struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DependencyRuleSpec `json:"spec"`

	// +optional
	Status DependencyRuleStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// DependencyRuleList contains a list of DependencyRule.
type DependencyRuleList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DependencyRule `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DependencyRule{}, &DependencyRuleList{})
}
