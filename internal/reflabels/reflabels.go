// Package reflabels computes the labels that make a dependent findable by
// what it references: for every object a dependent references under the
// rules of its type, one label whose key is derived from the referenced
// object's group, resource and name, and one label naming the scheme (the
// rules) the set was computed under. Only the webhook's mutating admission
// writes them, recomputing them from the object on every write, so a user
// can neither remove nor forge them; the DELETE path then reads the
// dependents that may reference an object with two label-selected
// consistent LISTs (those carrying its key, and those not labelled under the
// current scheme) instead of listing every dependent. See
// docs/architecture.md, "Reference labels".
package reflabels

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-openapi/jsonpointer"
	"gomodules.xyz/jsonpatch/v2"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
)

// MaxReferences bounds the reference labels of one object. An object that
// references more distinct objects gets none, and the scheme label
// TooMany of its scheme instead of the scheme's fingerprint: every
// confirming read of its type lists it (see StaleSelector), as it did
// before labels existed, but it is labelled as its scheme says and is not
// relabelled (see UnlabelledSelector). It is also the webhook's default
// limit of the references of one object, so that only objects from before
// the limit, or under a larger one, have none.
const MaxReferences = 256

// NearLimit reports whether an object that references n objects is close
// to limit, the most one object may reference (the webhook's
// --max-references-per-object): at four fifths of it or more. A write that
// adds references and leaves a dependent there gets a warning, and the rules
// of its type say so.
func NearLimit(n, limit int) bool {
	return limit > 0 && n*5 >= limit*4
}

// keyHexDigits is how many hex digits of a SHA-256 name a referenced
// object in its label key. A collision only makes a read list more
// dependents than it needs to (each is checked against the rule's path).
const keyHexDigits = 40

// Reference is where the dependents of a type hold references to one
// protected resource.
type Reference struct {
	// Path is where the dependent holds the name (and what it reads next
	// to it).
	Path fieldpath.Reference
	// Target is the protected resource.
	Target schema.GroupResource
}

// Scheme is how the dependents of one type are labelled: from which
// references, under which fingerprint.
type Scheme struct {
	// Fingerprint is the value of the scheme label of a dependent labelled
	// under this scheme; it covers the rules (their UIDs) and the
	// references, so that a rule recreated or changed relabels.
	Fingerprint string
	// Salt is derived from the UIDs of the rules alone. Only the rules'
	// workspace, the controller and the webhook see those, and the salt is
	// written on no object: it enters the clearance fingerprint (see
	// ClearanceFingerprint), so that nobody who cannot read the rules can
	// know a clearance fingerprint before the webhook writes it.
	Salt string
	// References are the references of every rule of the type, sorted.
	References []Reference
}

// Rule is what a scheme covers of one rule.
type Rule struct {
	// Name names the rule in messages.
	Name string
	// UID is the rule's UID.
	UID types.UID
	// Dependent identifies the dependent type as the rule names it: its
	// APIExport, group, version and resource.
	Dependent string
	// References are the rule's references.
	References []Reference
}

// RuleOf returns what a scheme covers of rule; references whose path does
// not parse (the API rejects them) are left out, as the webhook leaves them
// out of its decisions.
func RuleOf(rule *depv1alpha1.DependencyRule) Rule {
	d := rule.Spec.Dependent
	r := Rule{Name: rule.Name, UID: rule.UID, Dependent: d.APIExportName + "/" + d.Group + "/" + d.Version + "/" + d.Resource}
	for _, dep := range rule.Spec.Dependencies {
		if p, err := ParseReference(dep); err == nil {
			r.References = append(r.References, Reference{Path: p, Target: schema.GroupResource{Group: dep.Group, Resource: dep.Resource}})
		}
	}
	return r
}

// ParseReference parses where a dependency's dependent holds references.
func ParseReference(d depv1alpha1.Dependency) (fieldpath.Reference, error) {
	return fieldpath.ParseReference(fieldpath.ReferenceSpec{
		Path:          d.FieldRef.Path,
		NamespacePath: d.FieldRef.NamespacePath,
		GroupPath:     d.FieldRef.GroupPath,
		Group:         d.Group,
		DefaultGroup:  d.FieldRef.DefaultGroup,
		KindPath:      d.FieldRef.KindPath,
		Kind:          d.FieldRef.Kind,
		DefaultKind:   d.FieldRef.DefaultKind,
	})
}

// SchemeOf returns the scheme of the dependents of one type under rules,
// all the rules that name it (in one workspace), or, if its dependents
// cannot be labelled, why: the rules name it in different APIExports or
// versions (a path could mean another field in another version), or a
// reference lies in the status (a write through the status subresource
// changes no labels, so such a reference could not be labelled).
func SchemeOf(rules []Rule) (Scheme, string) {
	if len(rules) == 0 {
		return Scheme{}, "no rule names the type"
	}
	var (
		uids []types.UID
		refs []Reference
	)
	for _, r := range rules {
		if r.Dependent != rules[0].Dependent {
			return Scheme{}, fmt.Sprintf("the rules %s and %s name the type in different APIExports or versions", rules[0].Name, r.Name)
		}
		for _, ref := range r.References {
			for _, p := range ref.Path.Paths() {
				if steps := p.Steps(); len(steps) > 0 && steps[0] == "status" {
					return Scheme{}, fmt.Sprintf("the rule %s reads the reference %s in the status, which writes through the status subresource change without relabelling", r.Name, ref.Path)
				}
			}
		}
		uids = append(uids, r.UID)
		refs = append(refs, r.References...)
	}
	return NewScheme(uids, refs), ""
}

// NewScheme returns the scheme of the references of the rules with the
// given UIDs.
func NewScheme(uids []types.UID, refs []Reference) Scheme {
	uids = slices.Clone(uids)
	slices.Sort(uids)
	uids = slices.Compact(uids)
	refs = slices.Clone(refs)
	slices.SortFunc(refs, compareReferences)
	refs = slices.CompactFunc(refs, func(a, b Reference) bool { return compareReferences(a, b) == 0 })
	h := sha256.New()
	_, _ = fmt.Fprintln(h, "reflabels/v1")
	for _, uid := range uids {
		_, _ = fmt.Fprintf(h, "rule %s\n", uid)
	}
	for _, r := range refs {
		_, _ = fmt.Fprintf(h, "ref %s %s %q\n", r.Target.Group, r.Target.Resource, r.Path.String())
	}
	salt := sha256.New()
	_, _ = fmt.Fprintln(salt, "reflabels/salt/v1")
	for _, uid := range uids {
		_, _ = fmt.Fprintf(salt, "rule %s\n", uid)
	}
	return Scheme{Fingerprint: hex.EncodeToString(h.Sum(nil))[:16], Salt: hex.EncodeToString(salt.Sum(nil)), References: refs}
}

func compareReferences(a, b Reference) int {
	return cmp.Or(cmp.Compare(a.Target.Group, b.Target.Group), cmp.Compare(a.Target.Resource, b.Target.Resource), cmp.Compare(a.Path.String(), b.Path.String()))
}

// Key returns the key of the label that a dependent carries while it
// references the object of target named name, in any namespace: the
// namespace is left to the scope of the read and to the rule's path.
func Key(target schema.GroupResource, name string) string {
	sum := sha256.Sum256([]byte(target.Group + "/" + target.Resource + "/" + name))
	return depv1alpha1.LabelReferencePrefix + hex.EncodeToString(sum[:])[:keyHexDigits]
}

// Managed reports whether a label key is one of those the webhook manages
// on dependents: the reference labels, the scheme label and the admission
// id (see package inflight).
func Managed(key string) bool {
	return key == depv1alpha1.LabelReferencesScheme || key == depv1alpha1.LabelAdmission || strings.HasPrefix(key, depv1alpha1.LabelReferencePrefix)
}

// StaleSelector returns the label selector of the dependents that a
// confirming read lists in full under the scheme with fingerprint fp: those
// without the scheme label, or with another value (TooMany(fp) included).
func StaleSelector(fp string) string {
	return depv1alpha1.LabelReferencesScheme + "!=" + fp
}

// TooMany returns the value of the scheme label of a dependent that
// references more than MaxReferences objects under the scheme with
// fingerprint fp, and carries no reference labels. It is not fp, so
// confirming reads list such a dependent with the stale ones.
func TooMany(fp string) string {
	return fp + "-many"
}

// UnlabelledSelector returns the label selector of the dependents that are
// not labelled under the scheme with fingerprint fp yet, and must be
// relabelled: those whose scheme label is neither fp nor TooMany(fp).
func UnlabelledSelector(fp string) string {
	return depv1alpha1.LabelReferencesScheme + " notin (" + fp + "," + TooMany(fp) + ")"
}

// LabelledUnder reports whether a dependent whose scheme label is value is
// labelled under the scheme with fingerprint fp: with its reference labels,
// or with none as it references too many objects.
func LabelledUnder(value, fp string) bool {
	return value != "" && (value == fp || value == TooMany(fp))
}

// Labels returns the managed labels that the scheme gives the object raw
// (its JSON): one key per object it references, and the scheme label. An
// object with more than MaxReferences distinct references gets only the
// scheme label, with the value TooMany. It fails if a path cannot be read
// (raw is not a JSON object, or is malformed where a path leads).
func (s Scheme) Labels(raw []byte) (map[string]string, error) {
	labels := map[string]string{}
	for _, r := range s.References {
		err := r.Path.EachJSON(raw, func(v fieldpath.Value) bool {
			if v.Name != "" {
				labels[Key(r.Target, v.Name)] = ""
			}
			return len(labels) <= MaxReferences
		})
		if err != nil {
			return nil, fmt.Errorf("failed to read %s: %w", r.Path, err)
		}
		if len(labels) > MaxReferences {
			return map[string]string{depv1alpha1.LabelReferencesScheme: TooMany(s.Fingerprint)}, nil
		}
	}
	labels[depv1alpha1.LabelReferencesScheme] = s.Fingerprint
	return labels, nil
}

// Patch returns the JSON patch operations that make the managed labels of
// an object whose labels are current exactly want, leaving every other
// label alone; none if they are already.
func Patch(current, want map[string]string) []jsonpatch.JsonPatchOperation {
	var ops []jsonpatch.JsonPatchOperation
	if current == nil {
		if len(want) == 0 {
			return nil
		}
		return []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/metadata/labels", maps.Clone(want))}
	}
	for _, k := range slices.Sorted(maps.Keys(current)) {
		if _, ok := want[k]; Managed(k) && !ok {
			ops = append(ops, jsonpatch.NewOperation("remove", "/metadata/labels/"+jsonpointer.Escape(k), nil))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := current[k]; !ok || v != want[k] {
			ops = append(ops, jsonpatch.NewOperation("add", "/metadata/labels/"+jsonpointer.Escape(k), want[k]))
		}
	}
	return ops
}
