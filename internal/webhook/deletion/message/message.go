// Package message renders the denial of a DELETE: the message that names
// the blockers (the dependents that still reference the object), and the
// status details that list them for tools.
package message

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Blocker is a dependent object that still references the object being
// deleted.
type Blocker struct {
	// Kind of the dependent, e.g. VirtualMachine.
	Kind string
	// Namespace of the dependent; empty for cluster-scoped dependents.
	Namespace string
	// Name of the dependent.
	Name string
	// Rule is the rule under which it references the object, as
	// <logical cluster>/<name>; Path is the field path at which it does
	// (the rule's paths, joined with " or ", where several may).
	Rule string `json:"rule,omitempty"`
	Path string `json:"path,omitempty"`
}

// String renders the blocker as Kind/name or Kind/namespace/name.
func (b Blocker) String() string {
	if b.Namespace == "" {
		return b.Kind + "/" + b.Name
	}
	return b.Kind + "/" + b.Namespace + "/" + b.Name
}

// CompareBlockers orders blockers by kind, namespace and name.
func CompareBlockers(a, b Blocker) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// SameDependent reports whether two blockers are the same dependent (under
// whichever rules).
func SameDependent(a, b Blocker) bool {
	return CompareBlockers(a, b) == 0
}

// Causes of a denial in its status details (metav1.StatusDetails.Causes),
// for tools: one CauseBlocker per blocker, up to DefaultMaxCauses, whose
// message is the blocker as JSON ({"kind","namespace","name","rule","path"})
// and whose field is its path, and one CauseBlockers whose message is the
// number of blockers.
const (
	CauseBlocker  metav1.CauseType = "dependencies.opendefense.cloud/blocker"
	CauseBlockers metav1.CauseType = "dependencies.opendefense.cloud/blockers"
	// DefaultMaxCauses is how many blockers a denial's details list; the
	// total is always there. 1,000 blockers take about 120 KB.
	DefaultMaxCauses = 1000
)

// Details are the status details of a denial of target's object
// named name: the blockers (sorted, without duplicates), at most limit of
// them, and their number.
func Details(target schema.GroupResource, name string, blockers []Blocker, limit int) *metav1.StatusDetails {
	d := &metav1.StatusDetails{Name: name, Group: target.Group, Kind: target.Resource}
	for i, b := range blockers {
		if i == limit {
			break
		}
		msg, err := json.Marshal(struct {
			Kind      string `json:"kind"`
			Namespace string `json:"namespace,omitempty"`
			Name      string `json:"name"`
			Rule      string `json:"rule,omitempty"`
			Path      string `json:"path,omitempty"`
		}{b.Kind, b.Namespace, b.Name, b.Rule, b.Path})
		if err != nil {
			continue
		}
		d.Causes = append(d.Causes, metav1.StatusCause{Type: CauseBlocker, Message: string(msg), Field: b.Path})
	}
	d.Causes = append(d.Causes, metav1.StatusCause{Type: CauseBlockers, Message: strconv.Itoa(len(blockers))})
	return d
}

// Denied explains why an object cannot be deleted, naming at most limit
// blockers (sorted) and counting the rest. The blockers are sorted in place.
func Denied(target schema.GroupResource, namespace, name string, blockers []Blocker, limit int) string {
	slices.SortFunc(blockers, CompareBlockers)
	blockers = slices.CompactFunc(blockers, SameDependent)

	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", target, name)
	if namespace != "" {
		fmt.Fprintf(&b, " in namespace %q", namespace)
	}
	b.WriteString(" is still referenced by ")
	for i, bl := range blockers {
		if i == limit {
			fmt.Fprintf(&b, " and %d more", len(blockers)-limit)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(bl.String())
	}
	b.WriteString("; delete these or remove their references first")
	return b.String()
}
