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
	set := func(c metav1.Condition) {
		c.ObservedGeneration = rule.Generation
		meta.SetStatusCondition(&status.Conditions, c)
	}

	o := outcomeOf(rule, workspaces, res)
	resolved, installed := o.resolvedCondition(), o.installedCondition()
	set(resolved)
	set(installed)
	set(readyCondition(status.Conditions, resolved, installed, o.installed))
	set(cycleCondition(cycles))
	return status
}

// outcome is what a reconcile did for the workspaces of one rule, as
// messages: the protected workspaces resolved and not, those whose
// configuration is installed and those where writing it failed.
type outcome struct {
	resolved, unresolved, installed, failed []string
}

// outcomeOf sorts the protected workspaces of rule (its apiExportRef
// paths, and its own workspace) by what the reconcile did for them.
func outcomeOf(rule *depv1alpha1.DependencyRule, workspaces map[string]logicalcluster.Name, res results) outcome {
	var paths []string
	for _, d := range rule.Spec.Dependencies {
		paths = append(paths, d.APIExportRef.Path)
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)

	var o outcome
	for _, p := range paths {
		cluster, ok := workspaces[p]
		installErr, processed := res.installed[cluster]
		switch {
		case res.unresolved[p] != nil:
			o.unresolved = append(o.unresolved, fmt.Sprintf("%s: %v", p, res.unresolved[p]))
		case !ok || !processed:
			// The path was not processed in this reconcile, which does not
			// happen for rules it listed; report it rather than claim success.
			o.unresolved = append(o.unresolved, fmt.Sprintf("%s: not resolved yet", p))
		case installErr != nil:
			o.resolved = append(o.resolved, fmt.Sprintf("%s (%s)", p, cluster))
			o.failed = append(o.failed, fmt.Sprintf("%s: %v", p, installErr))
		default:
			o.resolved = append(o.resolved, fmt.Sprintf("%s (%s)", p, cluster))
			o.installed = append(o.installed, p)
		}
	}
	// The rule's own workspace serves the dependent and gets the webhook
	// that refuses new references to objects being deleted.
	if err := res.installed[logicalcluster.From(rule)]; err != nil {
		o.failed = append(o.failed, fmt.Sprintf("the rule's own workspace (for new references of %s): %v", rule.Spec.Dependent.Resource, err))
	}
	return o
}

// resolvedCondition is the TargetsResolved condition.
func (o outcome) resolvedCondition() metav1.Condition {
	c := metav1.Condition{Type: depv1alpha1.ConditionTargetsResolved, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonResolved,
		Message: "Resolved " + strings.Join(o.resolved, ", ")}
	if len(o.unresolved) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, depv1alpha1.ReasonResolutionFailed
		c.Message = "Failed to resolve " + strings.Join(o.unresolved, "; ")
	}
	return c
}

// installedCondition is the WebhooksInstalled condition.
func (o outcome) installedCondition() metav1.Condition {
	c := metav1.Condition{Type: depv1alpha1.ConditionWebhooksInstalled, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonInstalled,
		Message: "Webhook installed in " + strings.Join(o.installed, ", ")}
	switch {
	case len(o.failed) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, depv1alpha1.ReasonInstallFailed
		c.Message = "Failed to install the webhook in " + strings.Join(o.failed, "; ")
		if len(o.installed) > 0 {
			c.Message += "; installed in " + strings.Join(o.installed, ", ")
		}
	case len(o.unresolved) > 0 && len(o.installed) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, depv1alpha1.ReasonTargetsUnresolved
		c.Message = "No webhook installed: no protected workspace could be resolved"
	case len(o.unresolved) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, depv1alpha1.ReasonTargetsUnresolved
		c.Message = "Webhook installed in " + strings.Join(o.installed, ", ") + ", but not in the workspaces that could not be resolved"
	}
	return c
}

// readyCondition is the Ready condition: the first of resolved, installed
// and the webhook's conditions (in conditions) that takes protection away,
// or True.
func readyCondition(conditions []metav1.Condition, resolved, installed metav1.Condition, installedIn []string) metav1.Condition {
	ready := metav1.Condition{Type: depv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: depv1alpha1.ReasonProtecting,
		Message: "Deletion protection is active in " + strings.Join(installedIn, ", ")}
	switch {
	case resolved.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, resolved.Reason, resolved.Message
	case installed.Status != metav1.ConditionTrue:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, installed.Reason, installed.Message
	}
	// The webhook reports whether it can read the rule's dependents; a
	// problem there (no access granted, nothing served) means the rule does
	// not protect anything. While the webhook has not reported, or is still
	// listing, misses are checked live, so protection is active.
	if indexed := meta.FindStatusCondition(conditions, depv1alpha1.ConditionDependentsIndexed); indexed != nil &&
		indexed.Status == metav1.ConditionFalse && ready.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, indexed.Reason, indexed.Message
	}
	// Likewise for a protected APIExport that does not serve what the rule
	// names: kcp never calls the webhook for such objects. (A protected
	// provider that has not granted the webhook read access only loses the
	// check of new references; deletes are still protected.)
	if guarded := meta.FindStatusCondition(conditions, depv1alpha1.ConditionReferencesGuarded); guarded != nil &&
		guarded.Status == metav1.ConditionFalse && guarded.Reason != depv1alpha1.ReasonAccessDenied && ready.Status == metav1.ConditionTrue {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, guarded.Reason, guarded.Message
	}
	return ready
}

// cycleCondition is the DependencyCycle condition for the type cycles the
// rule is part of.
func cycleCondition(cycles []depgraph.Cycle) metav1.Condition {
	c := metav1.Condition{Type: depv1alpha1.ConditionDependencyCycle, Status: metav1.ConditionFalse, Reason: depv1alpha1.ReasonNoCycle,
		Message: "The referenced types do not form a cycle with other rules"}
	if len(cycles) > 0 {
		names := make([]string, 0, len(cycles))
		for _, cycle := range cycles {
			names = append(names, cycle.String())
		}
		c.Status, c.Reason = metav1.ConditionTrue, depv1alpha1.ReasonCycleDetected
		c.Message = fmt.Sprintf("Dependency cycle: %s. Objects on a cycle can protect each other from deletion; delete one of them with the %s=true annotation to break it",
			strings.Join(names, "; "), depv1alpha1.AnnotationSkipProtection)
	}
	return c
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
