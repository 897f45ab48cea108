// Package webhookconfig computes the admission configurations that the
// controller installs in provider workspaces: a ValidatingWebhookConfiguration
// in every workspace that serves resources protected by any DependencyRule
// (a DELETE webhook, and a webhook that guards the webhook's records on
// protected objects) or dependents of its own rules (a CREATE and UPDATE
// webhook that refuses new references to objects being deleted), and a
// MutatingWebhookConfiguration in every workspace whose dependents the
// webhook labels with what they reference (see package reflabels). The
// desired state is computed from the complete set of rules every time;
// nothing here remembers earlier results.
package webhookconfig

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
)

const (
	// Name is the name of the ValidatingWebhookConfiguration and of the
	// MutatingWebhookConfiguration in every workspace that needs one.
	Name = "dependency-controller"
	// WebhookName is the name of the webhook that protects objects from
	// deletion.
	WebhookName = "deletion.dependencies.opendefense.cloud"
	// ReferencesWebhookName is the name of the webhook that refuses new
	// references to objects that are being deleted.
	ReferencesWebhookName = "references.dependencies.opendefense.cloud"
	// RecordsWebhookName is the name of the webhook that lets only the
	// dependency webhook write the records of deferred deletions on
	// protected objects.
	RecordsWebhookName = "records.dependencies.opendefense.cloud"
	// LabelsWebhookSuffix ends the names of the mutating webhooks that label
	// dependents, one per dependent type: <resource>.<group>.<suffix>.
	LabelsWebhookSuffix = "labels.dependencies.opendefense.cloud"
	// AdmittedWebhookName is the name of the mutating webhook that keeps
	// the ledger of admitted references on protected objects (see package
	// inflight) as the dependency webhook wrote it.
	AdmittedWebhookName = "admitted-references.dependencies.opendefense.cloud"
	// SkipProtectionWebhookName is the name of the mutating webhook that
	// records who set the skip-protection annotation on a protected object,
	// if that user may delete the object, and keeps that record as it
	// wrote it.
	SkipProtectionWebhookName = "skip-protection.dependencies.opendefense.cloud"

	// ReferencesConditionName is the name of the match condition of the
	// check of new references (see ReferencesCondition).
	ReferencesConditionName = "references-may-change"
	// RecordsConditionName is the name of the match condition of the guard
	// of records (see RecordsCondition).
	RecordsConditionName = "records-set-or-changed"
	// NotWebhookUserConditionName is the name of the match condition that
	// spares the webhook's own writes of records the call to the guard (see
	// Options.WebhookUser).
	NotWebhookUserConditionName = "not-the-dependency-webhook"
	// LabelsConditionName is the name of the match condition of a labelling
	// webhook (see LabelsCondition).
	LabelsConditionName = "labels-may-change"
	// AdmittedConditionName is the name of the match condition of the guard
	// of the ledger of admitted references (see AdmittedCondition).
	AdmittedConditionName = "admitted-references-set-or-changed"
	// SkipProtectionConditionName is the name of the match condition of
	// the guard of skip-protection (see SkipProtectionCondition).
	SkipProtectionConditionName = "skip-protection-set"
	// NotRecordedConditionName is the name of the match condition of the
	// check of new references that spares it the writes whose new
	// references the labelling webhook recorded (see NotRecordedCondition).
	NotRecordedConditionName = "references-not-recorded"

	// EndpointRecords follows the logical cluster in the URL of the guard
	// of records (see EndpointURL).
	EndpointRecords = "records"
	// EndpointLabels follows the logical cluster in the URL of a labelling
	// webhook, which ends with the fingerprint of the scheme it was
	// configured for.
	EndpointLabels = "labels"
	// EndpointAdmitted follows the logical cluster in the URL of the guard
	// of the ledger of admitted references on protected objects.
	EndpointAdmitted = "admitted"
	// EndpointSkipProtection follows the logical cluster in the URL of the
	// guard of skip-protection on protected objects.
	EndpointSkipProtection = "skip-protection"

	// ManagedByLabel and ManagedByValue mark the configurations this
	// controller owns; only those are updated or pruned.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel.
	ManagedByValue = "dependency-controller"
	// WorkspacePathAnnotation records the workspace path the configuration
	// was installed for, so that it is not pruned while its path cannot be
	// resolved.
	WorkspacePathAnnotation = "dependencies.opendefense.cloud/workspace-path"
)

// Options are the webhook client settings shared by all configurations.
type Options struct {
	// URL is the HTTPS URL of the webhook's endpoint. Every configuration
	// calls it with the logical cluster of its workspace appended (see
	// EndpointURL).
	URL string
	// CABundle is the PEM encoded CA bundle that verifies the webhook's
	// serving certificate. Empty means the system roots of kcp.
	CABundle []byte
	// TimeoutSeconds is how long kcp waits for the webhook (1 to 30).
	TimeoutSeconds int32
	// FailurePolicy is what kcp does when the webhook cannot be reached, for
	// the DELETE webhook and the check of new references. The guard of
	// records and the labelling webhooks always fail closed: the trust in
	// records and labels rests on every write passing them.
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// WebhookUser is the user name as which kcp authenticates the webhook.
	// If set, kcp does not call the guard of records for that user's
	// writes, which the guard would allow anyway: writing a record then
	// costs no second admission call. Empty: the guard reviews the
	// webhook's writes too, and recognizes its own identity.
	WebhookUser string
}

// Workspace is a provider workspace with what the webhook guards in it.
type Workspace struct {
	// Path is the workspace path, recorded on the configuration; empty if
	// unknown.
	Path logicalcluster.Path
	// Protected are the resources served by the workspace's APIExports
	// that rules protect from deletion, sorted and without duplicates.
	Protected []schema.GroupVersionResource
	// Dependents are the resources served by the workspace's APIExports
	// that its own rules name as dependents, sorted and without duplicates.
	Dependents []schema.GroupVersionResource
	// StatusReferences are the dependents whose rules read references in
	// the status, sorted: the check of new references also runs on writes
	// through their status subresource.
	StatusReferences []schema.GroupResource
	// ReferenceFields are the top-level fields of the dependents in which
	// the references of its own rules lie (e.g. spec for
	// .spec.vpcRef.name), sorted and without duplicates. kcp calls the
	// check of new references for an UPDATE only if one of them changed;
	// empty: for every UPDATE.
	ReferenceFields []string
	// Labelled are the dependent types whose objects the webhook labels,
	// sorted by resource.
	Labelled []Labelled
	// Cleared are the clearance fingerprints (see
	// reflabels.ClearanceFingerprint) of the protected resources whose
	// objects kcp may delete without calling the DELETE webhook once the
	// webhook cleared them, sorted: those whose every rule reports
	// ReferencesTracked=True and whose every dependent type is labelled.
	Cleared []string
	// Recorded are the dependent types whose labelling webhook records the
	// references a write adds on the objects they name, and checks those
	// objects as the check of new references does, sorted: those labelled
	// whose every rule reports ReferencesTracked=True. kcp calls the check
	// of new references for none of their writes that the labelling webhook
	// recorded (see NotRecordedCondition).
	Recorded []schema.GroupResource
}

// Labelled is a dependent type whose objects the webhook labels with what
// they reference.
type Labelled struct {
	// Resource is the dependent resource, in the versions its rules name.
	Resource schema.GroupResource
	Versions []string
	// Scheme is the fingerprint of the scheme of its rules (see package
	// reflabels); the webhook vouches for its labels only when called for
	// this scheme.
	Scheme string
	// Fields are the top-level fields in which its references lie, sorted.
	Fields []string
}

// WebhookName returns the name of the labelling webhook of the type.
func (l Labelled) WebhookName() string {
	name := l.Resource.Resource + "." + l.Resource.Group + "." + LabelsWebhookSuffix
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(l.Resource.String()))
		name = "t" + hex.EncodeToString(sum[:])[:16] + "." + LabelsWebhookSuffix
	}
	return name
}

// Labelling reports whether the webhook has told, on every one of rules
// (the rules of one dependent type), how it labels their dependents: the
// DependentsLabelled condition, in any generation, and not with the reason
// NotLabellable. A webhook that writes it serves the labelling endpoint, so
// kcp may call it; one of a release without labels never writes it.
func Labelling(rules []*depv1alpha1.DependencyRule) bool {
	for _, rule := range rules {
		c := meta.FindStatusCondition(rule.Status.Conditions, depv1alpha1.ConditionDependentsLabelled)
		if c == nil || c.Reason == depv1alpha1.ReasonNotLabellable {
			return false
		}
	}
	return len(rules) > 0
}

// Desired computes from all rules what every workspace needs: the resources
// each dependency protects go to the workspace at its apiExportRef.path,
// found in workspaces (workspace paths to logical clusters); the dependent
// of each rule goes to the rule's own workspace, which serves it, and is
// labelled there once the webhook labels it (see Labelling). It returns the
// workspaces by logical cluster, and the paths that no workspace in
// workspaces has, sorted.
func Desired(rules []depv1alpha1.DependencyRule, workspaces map[string]logicalcluster.Name) (map[logicalcluster.Name]*Workspace, []logicalcluster.Path) {
	pathOf := make(map[logicalcluster.Name]string, len(workspaces))
	for path, cluster := range workspaces {
		pathOf[cluster] = path
	}
	desired := map[logicalcluster.Name]*Workspace{}
	get := func(cluster logicalcluster.Name) *Workspace {
		ws, ok := desired[cluster]
		if !ok {
			ws = &Workspace{Path: logicalcluster.NewPath(pathOf[cluster])}
			desired[cluster] = ws
		}
		return ws
	}
	unresolved := map[string]bool{}
	type dependentType struct {
		cluster  logicalcluster.Name
		resource schema.GroupResource
	}
	types := map[dependentType][]*depv1alpha1.DependencyRule{}
	type protectedType struct {
		cluster  logicalcluster.Name
		resource schema.GroupResource
	}
	// protections are the dependent types that reference each protected
	// type, and untracked those with a rule that does not report
	// ReferencesTracked=True.
	protections := map[protectedType][]dependentType{}
	untracked := map[protectedType]bool{}
	for i := range rules {
		rule := &rules[i]
		d := rule.Spec.Dependent
		own := get(logicalcluster.From(rule))
		dependent := schema.GroupVersionResource{Group: d.Group, Version: d.Version, Resource: d.Resource}
		own.Dependents = append(own.Dependents, dependent)
		t := dependentType{logicalcluster.From(rule), dependent.GroupResource()}
		types[t] = append(types[t], rule)
		for _, dep := range rule.Spec.Dependencies {
			field := topLevelField(dep.FieldRef.Path)
			own.ReferenceFields = append(own.ReferenceFields, field)
			if field == "status" {
				own.StatusReferences = append(own.StatusReferences, dependent.GroupResource())
			}
			cluster, ok := workspaces[dep.APIExportRef.Path]
			if !ok {
				unresolved[dep.APIExportRef.Path] = true
				continue
			}
			ws := get(cluster)
			ws.Protected = append(ws.Protected, schema.GroupVersionResource{Group: dep.Group, Version: dep.Version, Resource: dep.Resource})
			p := protectedType{cluster, schema.GroupResource{Group: dep.Group, Resource: dep.Resource}}
			protections[p] = append(protections[p], t)
			untracked[p] = untracked[p] || !meta.IsStatusConditionTrue(rule.Status.Conditions, depv1alpha1.ConditionReferencesTracked)
		}
	}
	schemes := map[dependentType]reflabels.Scheme{}
	for t, rs := range types {
		if l, scheme, ok := labelled(t.resource, rs); ok {
			desired[t.cluster].Labelled = append(desired[t.cluster].Labelled, l)
			schemes[t] = scheme
			if allTracked(rs) {
				desired[t.cluster].Recorded = append(desired[t.cluster].Recorded, t.resource)
			}
		}
	}
	for p, dependents := range protections {
		if fp, ok := clearance(p.cluster, p.resource, dependents, schemes, untracked[p]); ok {
			desired[p.cluster].Cleared = append(desired[p.cluster].Cleared, fp)
		}
	}
	for _, ws := range desired {
		slices.SortFunc(ws.Protected, compareGVR)
		ws.Protected = slices.Compact(ws.Protected)
		slices.SortFunc(ws.Dependents, compareGVR)
		ws.Dependents = slices.Compact(ws.Dependents)
		slices.SortFunc(ws.StatusReferences, compareGR)
		ws.StatusReferences = slices.Compact(ws.StatusReferences)
		slices.SortFunc(ws.Labelled, func(a, b Labelled) int { return compareGR(a.Resource, b.Resource) })
		slices.Sort(ws.ReferenceFields)
		ws.ReferenceFields = slices.Compact(ws.ReferenceFields)
		slices.Sort(ws.Cleared)
		ws.Cleared = slices.Compact(ws.Cleared)
		slices.SortFunc(ws.Recorded, compareGR)
		if slices.Contains(ws.ReferenceFields, "") {
			// A path that does not parse (the schema rejects it): every
			// UPDATE is checked.
			ws.ReferenceFields = nil
		}
	}
	paths := make([]logicalcluster.Path, 0, len(unresolved))
	for _, p := range slices.Sorted(maps.Keys(unresolved)) {
		paths = append(paths, logicalcluster.NewPath(p))
	}
	return desired, paths
}

// allTracked reports whether every one of rules reports ReferencesTracked=True:
// a webhook that records references wrote it, after its probes showed the
// labelling webhook in effect on every shard. The check of new references
// is spared a write only then, so that kcp calls the labelling webhook for
// every write it spares (see NotRecordedCondition).
func allTracked(rules []*depv1alpha1.DependencyRule) bool {
	for _, rule := range rules {
		if !meta.IsStatusConditionTrue(rule.Status.Conditions, depv1alpha1.ConditionReferencesTracked) {
			return false
		}
	}
	return len(rules) > 0
}

// clearance returns the clearance fingerprint of the protected resource of
// provider that the dependent types (in any order, repeated) reference, if
// kcp may skip the DELETE webhook for objects cleared under it: no rule
// that protects it says its references are untracked, and every dependent
// type is labelled (schemes has it).
func clearance[T comparable](provider logicalcluster.Name, resource schema.GroupResource, dependents []T, schemes map[T]reflabels.Scheme, untracked bool) (string, bool) {
	if untracked {
		return "", false
	}
	fps := make([]reflabels.Scheme, 0, len(dependents))
	for _, t := range dependents {
		s, ok := schemes[t]
		if !ok {
			return "", false
		}
		fps = append(fps, s)
	}
	return reflabels.ClearanceFingerprint(provider.String(), resource, fps), true
}

// labelled returns the labelling webhook of the dependent resource of rs,
// all the rules that name it in one workspace, and the scheme of its
// labels, if its dependents are labellable and the webhook labels them
// (see Labelling).
func labelled(resource schema.GroupResource, rs []*depv1alpha1.DependencyRule) (Labelled, reflabels.Scheme, bool) {
	if !Labelling(rs) {
		return Labelled{}, reflabels.Scheme{}, false
	}
	covered := make([]reflabels.Rule, 0, len(rs))
	l := Labelled{Resource: resource}
	for _, rule := range rs {
		covered = append(covered, reflabels.RuleOf(rule))
		l.Versions = append(l.Versions, rule.Spec.Dependent.Version)
		for _, dep := range rule.Spec.Dependencies {
			l.Fields = append(l.Fields, topLevelField(dep.FieldRef.Path))
		}
	}
	scheme, reason := reflabels.SchemeOf(covered)
	if reason != "" || slices.Contains(l.Fields, "") {
		return Labelled{}, reflabels.Scheme{}, false
	}
	slices.Sort(l.Versions)
	l.Versions = slices.Compact(l.Versions)
	slices.Sort(l.Fields)
	l.Fields = slices.Compact(l.Fields)
	l.Scheme = scheme.Fingerprint
	return l, scheme, true
}

// topLevelField returns the first field name of a field path, or "" if it
// does not parse.
func topLevelField(path string) string {
	p, err := fieldpath.Parse(path)
	if err != nil {
		return ""
	}
	return p.Steps()[0]
}

// fieldsChanged returns the CEL expression that is true when one of the
// top-level fields differs between object and oldObject (or is in only
// one of them).
func fieldsChanged(fields []string) string {
	quoted := make([]string, len(fields))
	for i, f := range fields {
		quoted[i] = strconv.Quote(f)
	}
	return "[" + strings.Join(quoted, ", ") + "]" +
		".exists(f, (f in object) != (f in oldObject) || f in object && object[f] != oldObject[f])"
}

// ReferencesCondition returns the CEL expression of the match condition of
// the check of new references: every CREATE, and an UPDATE that changes
// one of fields (top-level fields of the object; see
// Workspace.ReferenceFields). An UPDATE that changes none of them, such as
// one of labels, annotations or finalizers only, adds no reference, so kcp
// need not call the webhook for it.
func ReferencesCondition(fields []string) string {
	return "request.operation != 'UPDATE' || " + fieldsChanged(fields)
}

// LabelsCondition returns the CEL expression of the match condition of a
// labelling webhook: every CREATE, and an UPDATE that sets, changes or
// removes a label the webhook manages (see reflabels.Managed) or changes
// one of fields (the top-level fields in which the type's references lie).
// Any other UPDATE, such as one of other labels (a deferred deletion's
// record among them), keeps both the references and the managed labels.
// It evaluates without error whether the labels of either object are
// absent, {} or null (see metadataMapOf).
func LabelsCondition(fields []string) string {
	// changedIn: a managed label of a is not in b with the same value.
	changedIn := func(a, b string) string {
		return metadataMapOf(a, "labels") + ".exists(k, (k.startsWith(" + strconv.Quote(depv1alpha1.LabelReferencePrefix) +
			") || k == " + strconv.Quote(depv1alpha1.LabelReferencesScheme) + " || k == " + strconv.Quote(depv1alpha1.LabelAdmission) + ") && " +
			a + ".?metadata.?labels[?k] != " + b + ".?metadata.?labels[?k])"
	}
	return "request.operation != 'UPDATE' || " + changedIn("object", "oldObject") + " || " + changedIn("oldObject", "object") + " || " + fieldsChanged(fields)
}

// RecordsCondition returns the CEL expression of the match condition of
// the guard of records: the deletion-requested label or the deletion-request
// annotation is set by a CREATE, or set to a new value by an UPDATE.
// Removing them (cancelling a deferred deletion), and an UPDATE that keeps
// their values (re-applying an exported object), do not call the webhook.
// It evaluates without error on every shape of labels and annotations (see
// metadataKeyOf).
func RecordsCondition() string {
	set := func(field, key string) string {
		return "(" + metadataKeyOf("object", field, key) + ".hasValue() && (request.operation != 'UPDATE' || " +
			metadataKeyOf("object", field, key) + " != " + metadataKeyOf("oldObject", field, key) + "))"
	}
	return set("labels", depv1alpha1.LabelDeletionRequested) + " || " + set("annotations", depv1alpha1.AnnotationDeletionRequest)
}

// NotClearedSelector returns the object selector of the DELETE webhook:
// every object but one labelled cleared (api/v1alpha1.LabelCleared) under
// one of fingerprints (see Workspace.Cleared). kcp matches it against the
// stored object a DELETE is admitted on, in microseconds. Only the webhook
// sets or changes the label: its guard keeps the stored label on every
// other UPDATE and drops it from every CREATE, and the write that records
// a reference on the object removes it. A fingerprint covers salts that
// nobody sees who cannot read the rules, so no value set before the guard
// was in effect is one of fingerprints; see docs/architecture.md, "Cleared
// objects".
func NotClearedSelector(fingerprints []string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: depv1alpha1.LabelCleared, Operator: metav1.LabelSelectorOpNotIn, Values: slices.Clone(fingerprints),
	}}}
}

// NotRecordedCondition returns the CEL expression of the match condition
// of the check of new references that spares it a CREATE or UPDATE of one
// of resources (see Workspace.Recorded) that carries an admission id it
// did not carry before (api/v1alpha1.LabelAdmission). Only the labelling
// webhook, which kcp calls for every such write, leaves an id there that
// the write did not store before (it removes one it did not set), and it
// sets one only when it recorded a reference on the object it names; it
// then refused the write if that object, or any other the write adds a
// reference to, is being deleted or its deletion is deferred, as the check
// of new references would. A dry run, a write through a subresource and a
// write that records nothing keep the id they had, and are checked.
func NotRecordedCondition(resources []schema.GroupResource) string {
	quoted := make([]string, len(resources))
	for i, r := range resources {
		quoted[i] = strconv.Quote(r.Resource + "." + r.Group)
	}
	id := func(obj string) string { return stringOf(metadataKeyOf(obj, "labels", depv1alpha1.LabelAdmission)) }
	return "!([" + strings.Join(quoted, ", ") + "].exists(r, r == request.resource.resource + '.' + request.resource.group) && " +
		id("object") + " != '' && (request.operation == 'CREATE' || " + id("object") + " != " + id("oldObject") + "))"
}

// stringOf returns the CEL expression of the optional value opt as a
// string: ” where it is none or not a string (a null).
func stringOf(opt string) string {
	return opt + ".optFlatMap(v, type(v) == string ? optional.of(v) : optional.none()).orValue('')"
}

// SkipProtectionCondition returns the CEL expression of the match
// condition of the guard of skip-protection: a write that sets the
// skip-protection annotation to "true" (a CREATE with it, or an UPDATE
// from any other value or none), or that carries a record of who set it
// that differs from the stored one (a CREATE with any). An UPDATE that
// keeps the annotation "true" (a GitOps tool re-applying its manifest) is
// no new setting, and removing it only takes an effect away: neither calls
// the guard.
func SkipProtectionCondition() string {
	skip := func(obj string) string {
		return annotationOf(obj, depv1alpha1.AnnotationSkipProtection) + ".orValue('') == 'true'"
	}
	record := func(obj string) string { return annotationOf(obj, depv1alpha1.AnnotationSkipProtectionSetBy) }
	return "request.operation == 'CREATE' ? " + skip("object") + " || " + record("object") + ".hasValue() : " +
		skip("object") + " && !(" + skip("oldObject") + ") || " + record("object") + " != " + record("oldObject")
}

// metadataKeyOf returns the CEL expression of the key of the metadata
// field (labels or annotations) of obj (object or oldObject) as an optional
// value: none where the object, the field (absent or null) or the key are
// missing. Optional field selection evaluates without error on every shape
// kcp admits (see the kcp contract suite).
func metadataKeyOf(obj, field, key string) string {
	return obj + ".?metadata.?" + field + "[?" + strconv.Quote(key) + "]"
}

// annotationOf returns the CEL expression of the annotation key of obj as
// an optional value (see metadataKeyOf).
func annotationOf(obj, key string) string {
	return metadataKeyOf(obj, "annotations", key)
}

// metadataMapOf returns the CEL expression of the metadata field (labels
// or annotations) of obj as a map to iterate over: {} where the object is
// missing or the field is absent, null or empty. Optional field selection
// alone is not enough: it yields a null field as optional.of(null), which
// orValue({}) returns as null, and iterating over null is an error; a
// null or empty map is a zero value, which optional.ofNonZeroValue turns
// into none (see the kcp contract suite).
func metadataMapOf(obj, field string) string {
	return obj + ".?metadata.?" + field + ".optFlatMap(m, optional.ofNonZeroValue(m)).orValue({})"
}

// AdmittedCondition returns the CEL expression of the match condition of
// the guard of the ledger of admitted references: a CREATE that sets the
// annotation or the label that says the object is cleared
// (api/v1alpha1.LabelCleared), or an UPDATE that sets, changes or removes
// either. Any other write keeps both, so kcp need not call the guard for
// it.
func AdmittedCondition() string {
	key := depv1alpha1.AnnotationAdmittedReferences
	label := func(obj string) string { return metadataKeyOf(obj, "labels", depv1alpha1.LabelCleared) }
	return "request.operation == 'CREATE' ? " + annotationOf("object", key) + ".hasValue() || " + label("object") + ".hasValue() : " +
		annotationOf("object", key) + " != " + annotationOf("oldObject", key) + " || " + label("object") + " != " + label("oldObject")
}

// NotWebhookLedgerCondition returns the CEL expression of the match
// condition that spares the guard of the ledger the webhook's own writes of
// a new ledger (user is the webhook's user name), which it would allow
// anyway; any other write of the webhook's user still reaches the guard:
// its probes of the guard, which write a throwaway ledger or only a
// throwaway cleared label, and its writes of the cleared label alone.
func NotWebhookLedgerCondition(user string) string {
	key := depv1alpha1.AnnotationAdmittedReferences
	return NotUserCondition(user) + " || !" + annotationOf("object", key) + ".orValue('').startsWith('v1 ') || " +
		annotationOf("object", key) + " == " + annotationOf("oldObject", key)
}

// NotUserCondition returns the CEL expression of a match condition that
// holds for every request but those of the user named user.
func NotUserCondition(user string) string {
	return "request.userInfo.username != " + strconv.Quote(user)
}

func compareGVR(a, b schema.GroupVersionResource) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Version, b.Version))
}

func compareGR(a, b schema.GroupResource) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource))
}

// WebhookURL returns the URL with which the configuration in the workspace
// of logical cluster cluster calls the webhook: kcp calls a workspace's
// configuration only for objects that the workspace's APIExports serve, so
// the webhook learns from the URL whose objects a request is about.
func WebhookURL(base string, cluster logicalcluster.Name) string {
	return strings.TrimSuffix(base, "/") + "/" + cluster.String()
}

// EndpointURL returns the URL of an endpoint (EndpointRecords, or
// EndpointLabels followed by a scheme) of the workspace of logical cluster
// cluster.
func EndpointURL(base string, cluster logicalcluster.Name, endpoint ...string) string {
	return strings.Join(append([]string{WebhookURL(base, cluster)}, endpoint...), "/")
}

// clientConfig is the client configuration of a webhook at url.
func clientConfig(url string, opts Options) admissionregistrationv1.WebhookClientConfig {
	c := admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url)}
	if len(opts.CABundle) > 0 {
		c.CABundle = bytes.Clone(opts.CABundle)
	}
	return c
}

// Validating returns the desired ValidatingWebhookConfiguration of a
// workspace (logical cluster cluster), or nil if it needs none: a DELETE
// webhook and the guard of records for the protected resources, and the
// check of new references for the dependents. Every field that the API
// server would default is set, so that a configuration that needs no change
// compares equal to the stored one.
func Validating(ws *Workspace, cluster logicalcluster.Name, opts Options) *admissionregistrationv1.ValidatingWebhookConfiguration {
	webhook := func(name, url string, failure admissionregistrationv1.FailurePolicyType, rules []admissionregistrationv1.RuleWithOperations, sideEffects admissionregistrationv1.SideEffectClass) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:         name,
			ClientConfig: clientConfig(url, opts),
			Rules:        rules,
			// Equivalent: kcp also calls the webhook for versions of a
			// resource that no rule names, converted to one that a rule
			// names.
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			FailurePolicy:           ptr.To(failure),
			SideEffects:             ptr.To(sideEffects),
			TimeoutSeconds:          ptr.To(opts.TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
			// Empty selectors: every namespace and object. Any selector
			// someone else sets, which would narrow the protection, is
			// replaced.
			NamespaceSelector: &metav1.LabelSelector{},
			ObjectSelector:    &metav1.LabelSelector{},
		}
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: objectMeta(ws)}
	if len(ws.Protected) > 0 {
		// A denied DELETE under a rule with the Replay deletion policy is
		// recorded on the object, except in a dry run.
		wh := webhook(WebhookName, WebhookURL(opts.URL, cluster), opts.FailurePolicy,
			rules(ws.Protected, nil, admissionregistrationv1.Delete), admissionregistrationv1.SideEffectClassNoneOnDryRun)
		if len(ws.Cleared) > 0 {
			wh.ObjectSelector = NotClearedSelector(ws.Cleared)
		}
		cfg.Webhooks = append(cfg.Webhooks, wh)
	}
	if len(ws.Dependents) > 0 {
		// The check of new references records those of the types whose
		// dependents cannot be labelled on the objects they name, except
		// in a dry run.
		wh := webhook(ReferencesWebhookName, WebhookURL(opts.URL, cluster), opts.FailurePolicy,
			rules(ws.Dependents, ws.StatusReferences, admissionregistrationv1.Create, admissionregistrationv1.Update), admissionregistrationv1.SideEffectClassNoneOnDryRun)
		if len(ws.ReferenceFields) > 0 {
			wh.MatchConditions = append(wh.MatchConditions, admissionregistrationv1.MatchCondition{Name: ReferencesConditionName, Expression: ReferencesCondition(ws.ReferenceFields)})
		}
		if len(ws.Recorded) > 0 {
			wh.MatchConditions = append(wh.MatchConditions, admissionregistrationv1.MatchCondition{Name: NotRecordedConditionName, Expression: NotRecordedCondition(ws.Recorded)})
		}
		cfg.Webhooks = append(cfg.Webhooks, wh)
	}
	if len(ws.Protected) > 0 {
		wh := webhook(RecordsWebhookName, EndpointURL(opts.URL, cluster, EndpointRecords), admissionregistrationv1.Fail,
			rules(ws.Protected, nil, admissionregistrationv1.Create, admissionregistrationv1.Update), admissionregistrationv1.SideEffectClassNone)
		wh.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: RecordsConditionName, Expression: RecordsCondition()}}
		if opts.WebhookUser != "" {
			wh.MatchConditions = append(wh.MatchConditions, admissionregistrationv1.MatchCondition{Name: NotWebhookUserConditionName, Expression: NotUserCondition(opts.WebhookUser)})
		}
		cfg.Webhooks = append(cfg.Webhooks, wh)
	}
	if len(cfg.Webhooks) == 0 {
		return nil
	}
	return cfg
}

// Mutating returns the desired MutatingWebhookConfiguration of a workspace
// (logical cluster cluster), or nil if it needs none: a labelling webhook
// per labelled dependent type, which kcp calls again if a later mutating
// webhook changes the object, and for the protected resources the guard of
// the ledger of admitted references, which keeps the ledger as the
// dependency webhook wrote it whoever else writes the object, and the
// guard of skip-protection, which records who set the skip-protection
// annotation if that user may delete the object. All fail closed: the
// decisions rest on labels, ledgers and records that only the webhook
// writes.
func Mutating(ws *Workspace, cluster logicalcluster.Name, opts Options) *admissionregistrationv1.MutatingWebhookConfiguration {
	if len(ws.Labelled) == 0 && len(ws.Protected) == 0 {
		return nil
	}
	webhook := func(name, url string, resources []schema.GroupVersionResource, sideEffects admissionregistrationv1.SideEffectClass, conditions ...admissionregistrationv1.MatchCondition) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            clientConfig(url, opts),
			Rules:                   rules(resources, nil, admissionregistrationv1.Create, admissionregistrationv1.Update),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(sideEffects),
			TimeoutSeconds:          ptr.To(opts.TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			MatchConditions:         conditions,
		}
	}
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: objectMeta(ws)}
	for _, l := range ws.Labelled {
		resources := make([]schema.GroupVersionResource, 0, len(l.Versions))
		for _, v := range l.Versions {
			resources = append(resources, l.Resource.WithVersion(v))
		}
		// A labelling webhook records the references a write adds on the
		// objects they name, except in a dry run.
		cfg.Webhooks = append(cfg.Webhooks, webhook(l.WebhookName(), EndpointURL(opts.URL, cluster, EndpointLabels, l.Scheme), resources,
			admissionregistrationv1.SideEffectClassNoneOnDryRun,
			admissionregistrationv1.MatchCondition{Name: LabelsConditionName, Expression: LabelsCondition(l.Fields)}))
	}
	if len(ws.Protected) > 0 {
		conditions := []admissionregistrationv1.MatchCondition{{Name: AdmittedConditionName, Expression: AdmittedCondition()}}
		if opts.WebhookUser != "" {
			conditions = append(conditions, admissionregistrationv1.MatchCondition{Name: NotWebhookUserConditionName, Expression: NotWebhookLedgerCondition(opts.WebhookUser)})
		}
		cfg.Webhooks = append(cfg.Webhooks, webhook(AdmittedWebhookName, EndpointURL(opts.URL, cluster, EndpointAdmitted), ws.Protected,
			admissionregistrationv1.SideEffectClassNone, conditions...))
		// It asks kcp with a SubjectAccessReview, which stores nothing.
		cfg.Webhooks = append(cfg.Webhooks, webhook(SkipProtectionWebhookName, EndpointURL(opts.URL, cluster, EndpointSkipProtection), ws.Protected,
			admissionregistrationv1.SideEffectClassNone,
			admissionregistrationv1.MatchCondition{Name: SkipProtectionConditionName, Expression: SkipProtectionCondition()}))
	}
	return cfg
}

// objectMeta is the metadata of the configurations of a workspace.
func objectMeta(ws *Workspace) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: Name, Labels: map[string]string{ManagedByLabel: ManagedByValue}}
	if !ws.Path.Empty() {
		m.Annotations = map[string]string{WorkspacePathAnnotation: ws.Path.String()}
	}
	return m
}

// rules returns one rule per group and resource with ops, listing every
// version of it in resources (which are sorted), and for the resources in
// withStatus also their status subresource.
func rules(resources []schema.GroupVersionResource, withStatus []schema.GroupResource, ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
	var out []admissionregistrationv1.RuleWithOperations
	for _, gvr := range resources {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if last.APIGroups[0] == gvr.Group && last.Resources[0] == gvr.Resource {
				last.APIVersions = append(last.APIVersions, gvr.Version)
				continue
			}
		}
		names := []string{gvr.Resource}
		if slices.Contains(withStatus, gvr.GroupResource()) {
			names = append(names, gvr.Resource+"/status")
		}
		out = append(out, admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{gvr.Group},
				APIVersions: []string{gvr.Version},
				Resources:   names,
				Scope:       ptr.To(admissionregistrationv1.AllScopes),
			},
		})
	}
	return out
}

// IsManaged reports whether the configuration with metadata m carries the
// label of the configurations that the controller manages. Only those are
// written or deleted.
func IsManaged(m metav1.Object) bool {
	return m.GetLabels()[ManagedByLabel] == ManagedByValue
}

// UpToDate reports whether existing has the webhooks, labels and
// annotations of desired.
func UpToDate(existing, desired metav1.Object, existingWebhooks, desiredWebhooks any) bool {
	for k, v := range desired.GetLabels() {
		if existing.GetLabels()[k] != v {
			return false
		}
	}
	for k, v := range desired.GetAnnotations() {
		if existing.GetAnnotations()[k] != v {
			return false
		}
	}
	return equality.Semantic.DeepEqual(existingWebhooks, desiredWebhooks)
}

// guarded is one operation on one version of a (sub)resource that a
// webhook of a configuration is called for.
type guarded struct {
	webhook                  string
	operation                admissionregistrationv1.OperationType
	group, version, resource string
}

// calls returns every operation on a resource version that webhooks (name
// and rules) are called for.
func calls(add func(guarded), name string, rules []admissionregistrationv1.RuleWithOperations) {
	for _, r := range rules {
		for _, op := range r.Operations {
			for _, g := range r.APIGroups {
				for _, v := range r.APIVersions {
					for _, res := range r.Resources {
						add(guarded{name, op, g, v, res})
					}
				}
			}
		}
	}
}

// Reduces reports whether replacing the existing configurations of a
// workspace (either may be nil) with those of ws (nil: deleting them) stops
// a webhook from being called for an operation on a resource version that
// it is called for now: whether the change takes protection away, which
// for a labelling webhook means that writes could change references without
// relabelling. A match condition of the new configuration that the
// webhook does not have (by name and expression) counts: the text cannot
// tell a condition that holds for fewer requests from one that holds for
// the same requests on more object shapes (as after an upgrade), so
// either needs the proof of a complete listing before it is written; so
// does an object selector of the new configuration that the webhook does
// not have (the DELETE webhook's, see NotClearedSelector). A changed
// scheme of a labelling webhook does not count: the webhook stops
// vouching for labels of the old scheme. Changes of the client settings
// (URL, CA bundle, timeout, failure policy) do not count.
func Reduces(validating *admissionregistrationv1.ValidatingWebhookConfiguration, mutating *admissionregistrationv1.MutatingWebhookConfiguration, ws *Workspace) bool {
	keep := map[guarded]bool{}
	conditions := map[string][]admissionregistrationv1.MatchCondition{}
	selectors := map[string]*metav1.LabelSelector{}
	if ws != nil {
		if cfg := Validating(ws, "", Options{}); cfg != nil {
			for _, wh := range cfg.Webhooks {
				calls(func(g guarded) { keep[g] = true }, wh.Name, wh.Rules)
				if len(wh.MatchConditions) > 0 {
					conditions[wh.Name] = wh.MatchConditions
				}
				if len(wh.ObjectSelector.MatchLabels)+len(wh.ObjectSelector.MatchExpressions) > 0 {
					selectors[wh.Name] = wh.ObjectSelector
				}
			}
		}
		if cfg := Mutating(ws, "", Options{}); cfg != nil {
			for _, wh := range cfg.Webhooks {
				calls(func(g guarded) { keep[g] = true }, wh.Name, wh.Rules)
				conditions[wh.Name] = wh.MatchConditions
			}
		}
	}
	reduced := false
	check := func(name string, rules []admissionregistrationv1.RuleWithOperations, matchConditions []admissionregistrationv1.MatchCondition, selector *metav1.LabelSelector) {
		for _, want := range conditions[name] {
			if !slices.Contains(matchConditions, want) {
				reduced = true
			}
		}
		if want, ok := selectors[name]; ok && !equality.Semantic.DeepEqual(want, selector) {
			reduced = true
		}
		calls(func(g guarded) { reduced = reduced || !keep[g] }, name, rules)
	}
	if validating != nil {
		for _, wh := range validating.Webhooks {
			check(wh.Name, wh.Rules, wh.MatchConditions, wh.ObjectSelector)
		}
	}
	if mutating != nil {
		for _, wh := range mutating.Webhooks {
			check(wh.Name, wh.Rules, wh.MatchConditions, wh.ObjectSelector)
		}
	}
	return reduced
}

// Describe returns a short description of the resources protected in a
// target, e.g. "vpcs.network.example.io/v1, subnets.network.example.io/v1".
func Describe(resources []schema.GroupVersionResource) string {
	s := ""
	for i, gvr := range resources {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s.%s/%s", gvr.Resource, gvr.Group, gvr.Version)
	}
	return s
}
