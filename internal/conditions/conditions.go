package conditions

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/fieldpath"
	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
	"github.com/opendefensecloud/dependency-controller/internal/reflabels"
	"github.com/opendefensecloud/dependency-controller/internal/registry"
)

// Indexed returns the DependentsIndexed condition of a rule with the given
// field paths whose dependent source is in state. Its reason is that of
// depv1alpha1 for the state's phase, which is the phase's name, except for
// a synced source (ReasonIndexed) and a path not in the schema
// (ReasonFieldPathNotInSchema).
func Indexed(state index.State, paths []fieldpath.Reference, generation int64) metav1.Condition {
	c := metav1.Condition{Type: depv1alpha1.ConditionDependentsIndexed, Reason: string(state.Phase), Message: state.Message, ObservedGeneration: generation}
	var problems []string
	for _, p := range state.PathProblems {
		if slices.ContainsFunc(paths, func(r fieldpath.Reference) bool { return slices.Contains(r.Paths(), p.Path) }) {
			problems = append(problems, fmt.Sprintf("%s: %s", p.Path, p.Problem))
		}
	}
	if len(problems) > 0 && state.Phase.Effective() {
		c.Status, c.Reason = metav1.ConditionFalse, depv1alpha1.ReasonFieldPathNotInSchema
		c.Message = fmt.Sprintf("the schema of %s, as its APIExport serves it, cannot hold a name at %s; the rule never finds a reference there",
			state.Kind, strings.Join(problems, "; "))
		return c
	}
	switch state.Phase {
	case index.PhaseSynced:
		c.Status, c.Reason = metav1.ConditionTrue, depv1alpha1.ReasonIndexed
	case index.PhaseSyncing:
		c.Status = metav1.ConditionUnknown
	case index.PhaseVersionNotServed:
		c.Status = metav1.ConditionFalse
		c.Message += "; deletes that the rule protects are refused in workspaces that bind the APIExport until the rule names a served version"
	default:
		c.Status = metav1.ConditionFalse
		c.Message += "; until then the rule has no effect"
	}
	if c.Message == "" {
		c.Message = string(state.Phase)
	}
	return c
}

// Largest is the indexed dependent of a type that references the most
// objects, and how many one dependent may reference (the webhook's
// --max-references-per-object).
type Largest struct {
	Dependent  kcp.Meta
	References int
	Max        int
}

// WithLargest returns c, the DependentsIndexed condition of a rule whose
// dependents are of kind, with a message that names the dependent that
// references the most objects if that is close to the limit or past it
// (see reflabels.NearLimit): writes that add references past the limit
// are refused, so the provider learns of it before its users do. The
// condition stays True: the dependents are indexed.
func WithLargest(c metav1.Condition, kind string, l Largest) metav1.Condition {
	if c.Status != metav1.ConditionTrue || !reflabels.NearLimit(l.References, l.Max) {
		return c
	}
	who := l.Dependent.Name
	if l.Dependent.Namespace != "" {
		who = l.Dependent.Namespace + "/" + who
	}
	how := fmt.Sprintf("close to the limit of %d per object: a write that adds references past it is refused", l.Max)
	if l.References > l.Max {
		how = fmt.Sprintf("more than the limit of %d per object: writes that add references to it are refused until it references at most %d", l.Max, l.Max)
	}
	c.Message = fmt.Sprintf("%s; %s %s in logical cluster %s references %d objects, %s", c.Message, kind, who, l.Dependent.Cluster, l.References, how)
	return c
}

// Guarded returns the ReferencesGuarded condition of a rule with guard g,
// whose target sources are in the states that states returns. A target
// whose source is in a phase with a problem gives the condition that
// phase's name as its reason, as in Indexed.
func Guarded(g registry.Guard, states func(index.Source) index.State, generation int64) metav1.Condition {
	c := metav1.Condition{Type: depv1alpha1.ConditionReferencesGuarded, ObservedGeneration: generation}
	var guarded, syncing, problems []string
	reason := ""
	seen := map[index.Source]bool{}
	for _, ref := range g.References {
		if ref.Target.Export.Name == "" || seen[ref.Target] {
			continue
		}
		seen[ref.Target] = true
		state := states(ref.Target)
		what := fmt.Sprintf("%s of the APIExport %s", ref.Target.Resource.GroupResource(), ref.Target.Export)
		switch state.Phase {
		case index.PhaseSynced:
			guarded = append(guarded, what)
		case index.PhaseSyncing:
			syncing = append(syncing, what)
		default:
			if reason == "" {
				reason = string(state.Phase)
			}
			consequence := "new references to them are not checked until then"
			if state.Phase != index.PhaseAccessDenied {
				consequence = "objects of that type are not protected by this rule"
			}
			problems = append(problems, fmt.Sprintf("%s: %s; %s", what, state.Message, consequence))
		}
	}
	switch {
	case len(problems) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, reason, strings.Join(problems, "; ")
	case len(syncing) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, depv1alpha1.ReasonSyncing, "Checking access to "+strings.Join(syncing, ", ")
	case len(guarded) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, depv1alpha1.ReasonTargetsUnresolved, "No protected workspace binds the dependencies APIExport yet"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, depv1alpha1.ReasonGuarded
		c.Message = "New references to objects that are being deleted are refused: " + strings.Join(guarded, ", ")
	}
	return c
}
