package controller

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
	"github.com/opendefensecloud/dependency-controller/internal/webhookconfig"
)

// workItem is the controller's only request; see Reconciler.
var workItem = mcreconcile.Request{Request: reconcile.Request{NamespacedName: types.NamespacedName{Name: "all-dependency-rules"}}}

// SetupWithManager adds the controller to the manager, whose clusters are
// the workspaces that bind the APIExport and which engaged enumerates (the
// Clusters of kcp's apiexport provider). The controller reads from the
// manager's caches of those workspaces, writes through their clients,
// records events through them, and proves what the caches lack with
// complete listings through rules (see Reconciler). It reconciles on events
// in every workspace that binds the APIExport: DependencyRules (spec
// changes, creation, deletion, and changes of the conditions the webhook
// writes), the managed Validating- and MutatingWebhookConfigurations (to
// undo changes by others and to prune configurations left behind while the
// controller was down) and APIBindings (a workspace that binds the export may be protected
// now). Events on triggers (e.g. a rotated CA bundle) reconcile as well.
func SetupWithManager(mgr mcmanager.Manager, engaged ClusterNamer, rules *vw.VirtualWorkspace, opts Options, triggers <-chan event.GenericEvent) error {
	r := NewReconciler(NewClusters(mgr, engaged), NewCompleteLister(rules), opts)

	b := mcbuilder.ControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{
			// There is only one work item; see Reconciler.
			MaxConcurrentReconciles: 1,
			SkipNameValidation:      mgr.GetControllerOptions().SkipNameValidation,
		}).
		Watches(&depv1alpha1.DependencyRule{}, enqueueWorkItem,
			mcbuilder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, webhookConditionsChanged))).
		Watches(&admissionregistrationv1.ValidatingWebhookConfiguration{}, enqueueWorkItem,
			mcbuilder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetName() == webhookconfig.Name
			}))).
		Watches(&admissionregistrationv1.MutatingWebhookConfiguration{}, enqueueWorkItem,
			mcbuilder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetName() == webhookconfig.Name
			}))).
		Watches(&apisv1alpha2.APIBinding{}, enqueueWorkItem,
			mcbuilder.WithPredicates(predicate.Funcs{
				UpdateFunc: func(event.UpdateEvent) bool { return false },
			}))
	if triggers != nil {
		b = b.WatchesRawSource(source.TypedChannel(triggers, handler.TypedFuncs[client.Object, mcreconcile.Request]{
			GenericFunc: func(_ context.Context, _ event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) {
				q.Add(workItem)
			},
		}))
	}
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("failed to set up the controller: %w", err)
	}
	return nil
}

// webhookConditions are the conditions that the webhook writes on rules and
// from which the controller computes Ready (DependentsIndexed and
// ReferencesGuarded, whose messages it repeats), whether to install the
// labelling webhook of a type (DependentsLabelled, whose reason is enough)
// or whether the DELETE webhook honours clearances (ReferencesTracked,
// whose status is enough).
var webhookConditions = map[string]bool{
	depv1alpha1.ConditionDependentsIndexed:  true,
	depv1alpha1.ConditionReferencesGuarded:  true,
	depv1alpha1.ConditionDependentsLabelled: false,
	depv1alpha1.ConditionReferencesTracked:  false,
}

// webhookConditionsChanged passes updates of rules in which a condition that
// the webhook writes changed, so that Ready follows at once.
var webhookConditionsChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, ok1 := e.ObjectOld.(*depv1alpha1.DependencyRule)
	after, ok2 := e.ObjectNew.(*depv1alpha1.DependencyRule)
	if !ok1 || !ok2 {
		return false
	}
	for t, message := range webhookConditions {
		a, b := meta.FindStatusCondition(before.Status.Conditions, t), meta.FindStatusCondition(after.Status.Conditions, t)
		if (a == nil) != (b == nil) || a != nil && (a.Status != b.Status || a.Reason != b.Reason || message && a.Message != b.Message) {
			return true
		}
	}
	return false
}}

// enqueueWorkItem maps every event to the work item.
var enqueueWorkItem mchandler.TypedEventHandlerFunc[client.Object, mcreconcile.Request] = func(multicluster.ClusterName, cluster.Cluster) handler.TypedEventHandler[client.Object, mcreconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, client.Object) []mcreconcile.Request {
		return []mcreconcile.Request{workItem}
	})
}
