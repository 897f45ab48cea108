package deletion

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

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
}

// String renders the blocker as Kind/name or Kind/namespace/name.
func (b Blocker) String() string {
	if b.Namespace == "" {
		return b.Kind + "/" + b.Name
	}
	return b.Kind + "/" + b.Namespace + "/" + b.Name
}

func compareBlockers(a, b Blocker) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// deniedMessage explains why an object cannot be deleted, naming at most limit
// blockers (sorted) and counting the rest. The blockers are sorted in place.
func deniedMessage(target schema.GroupResource, namespace, name string, blockers []Blocker, limit int) string {
	slices.SortFunc(blockers, compareBlockers)
	blockers = slices.Compact(blockers)

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
