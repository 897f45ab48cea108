package controller

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcp-dev/logicalcluster/v3"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/depgraph"
	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
)

// results is what happened to every workspace in a reconcile.
type results struct {
	// installed holds, for every workspace that needs a webhook
	// configuration, nil if it is in place, or why it could not be written.
	installed map[logicalcluster.Name]error
	// unresolved holds, for every apiExportRef.path that no workspace
	// binding the APIExport has, why.
	unresolved map[string]error
}

// computeStatus returns the status a rule should have given the workspaces
// that bind the APIExport (paths to logical clusters), the results of the
// reconcile and the type cycles the rule is part of. Conditions keep their
// last transition time when their status does not change.
func computeStatus(rule *depv1alpha1.DependencyRule, workspaces map[string]logicalcluster.Name, res results, cycles []depgraph.Cycle) depv1alpha1.DependencyRuleStatus {
	status := *rule.Status.DeepCopy()
	status.ObservedGeneration = rule.Generation
	status.DependencyCount = int32(len(rule.Spec.Dependencies))

	var paths []string
	for _, d := range rule.Spec.Dependencies {
		paths = append(paths, d.APIExportRef.Path)
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)

	var resolved, unresolved, installed, failed []string
	for _, p := range paths {
		cluster, ok := workspaces[p]
		installErr, processed := res.installed[cluster]
		switch {
		case res.unresolved[p] != nil:
			unresolved = append(unresolved, fmt.Sprintf("%s: %v", p, res.unresolved[p]))
		case !ok || !processed:
			// The path was not processed in this reconcile, which does not
			// happen for rules it listed; report it rather than claim success.
			unresolved = append(unresolved, fmt.Sprintf("%s: not resolved yet", p))
		case installErr != nil:
			resolved = append(resolved, fmt.Sprintf("%s (%s)", p, cluster))
			failed = append(failed, fmt.Sprintf("%s: %v", p, installErr))
		default:
			resolved = append(resolved, fmt.Sprintf("%s (%s)", p, cluster))
			installed = append(installed, p)
		}
	}
	// The rule's own workspace serves the dependent and gets the webhook
	// that refuses new references to objects being deleted.
	if err := res.installed[logicalcluster.From(rule)]; err != nil {
		failed = append(failed, fmt.Sprintf("the rule's own workspace (for new references of %s): %v", rule.Spec.Dependent.Resource, err))
	}

	set := func(c metav1.Condition) {
		c.ObservedGeneration = rule.Generation
		meta.SetStatusCondition(&status.Conditions, c)
	}

	resolvedCond := metav1.Condition{Type: depv1alpha1.ConditionTargetsResolved, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonResolved,
		Message: "Resolved " + strings.Join(resolved, ", ")}
	if len(unresolved) > 0 {
		resolvedCond.Status, resolvedCond.Reason = metav1.ConditionFalse, depv1alpha1.ReasonResolutionFailed
		resolvedCond.Message = "Failed to resolve " + strings.Join(unresolved, "; ")
	}
	set(resolvedCond)

	installedCond := metav1.Condition{Type: depv1alpha1.ConditionWebhooksInstalled, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonInstalled,
		Message: "Webhook installed in " + strings.Join(installed, ", ")}
	switch {
	case len(failed) > 0:
		installedCond.Status, installedCond.Reason = metav1.ConditionFalse, depv1alpha1.ReasonInstallFailed
		installedCond.Message = "Failed to install the webhook in " + strings.Join(failed, "; ")
		if len(installed) > 0 {
			installedCond.Message += "; installed in " + strings.Join(installed, ", ")
		}
	case len(unresolved) > 0 && len(installed) == 0:
		installedCond.Status, installedCond.Reason = metav1.ConditionFalse, depv1alpha1.ReasonTargetsUnresolved
		installedCond.Message = "No webhook installed: no protected workspace could be resolved"
	case len(unresolved) > 0:
		installedCond.Status, installedCond.Reason = metav1.ConditionFalse, depv1alpha1.ReasonTargetsUnresolved
		installedCond.Message = "Webhook installed in " + strings.Join(installed, ", ") + ", but not in the workspaces that could not be resolved"
	}
	set(installedCond)

	ready := metav1.Condition{Type: depv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonProtecting,
		Message: "Deletion protection is active in " + strings.Join(installed, ", ")}
	switch {
	case resolvedCond.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, resolvedCond.Reason, resolvedCond.Message
	case installedCond.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, installedCond.Reason, installedCond.Message
	}
	// The webhook reports whether it can read the rule's dependents; a
	// problem there (no access granted, nothing served) means the rule does
	// not protect anything. While the webhook has not reported, or is still
	// listing, misses are checked live, so protection is active.
	if indexed := meta.FindStatusCondition(status.Conditions, depv1alpha1.ConditionDependentsIndexed); indexed != nil &&
		indexed.Status == metav1.ConditionFalse && ready.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, indexed.Reason, indexed.Message
	}
	// Likewise for a protected APIExport that does not serve what the rule
	// names: kcp never calls the webhook for such objects. (A protected
	// provider that has not granted the webhook read access only loses the
	// check of new references; deletes are still protected.)
	if guarded := meta.FindStatusCondition(status.Conditions, depv1alpha1.ConditionReferencesGuarded); guarded != nil &&
		guarded.Status == metav1.ConditionFalse && guarded.Reason != depv1alpha1.ReasonAccessDenied && ready.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, guarded.Reason, guarded.Message
	}
	set(ready)

	cycle := metav1.Condition{Type: depv1alpha1.ConditionDependencyCycle, Status: metav1.ConditionFalse, Reason: depv1alpha1.ReasonNoCycle,
		Message: "The referenced types do not form a cycle with other rules"}
	if len(cycles) > 0 {
		names := make([]string, 0, len(cycles))
		for _, c := range cycles {
			names = append(names, c.String())
		}
		cycle.Status, cycle.Reason = metav1.ConditionTrue, depv1alpha1.ReasonCycleDetected
		cycle.Message = fmt.Sprintf("Dependency cycle: %s. Objects on a cycle can protect each other from deletion; delete one of them with the %s=true annotation to break it",
			strings.Join(names, "; "), depv1alpha1.AnnotationSkipProtection)
	}
	set(cycle)

	return status
}

// kcpCondition is the KCPVersionTested condition for the kcp the controller
// talks to.
func kcpCondition(info kcpversion.Info, generation int64) metav1.Condition {
	c := metav1.Condition{Type: depv1alpha1.ConditionKCPVersionTested, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonTestedVersion,
		Message: info.Describe(), ObservedGeneration: generation}
	switch {
	case info.KCP == "":
		c.Status, c.Reason = metav1.ConditionUnknown, depv1alpha1.ReasonVersionUnknown
	case !info.Tested:
		c.Status, c.Reason = metav1.ConditionFalse, depv1alpha1.ReasonUntestedVersion
	}
	return c
}
