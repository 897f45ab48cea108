package controller

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// dropLegacyFinalizers removes from rules the finalizer with which releases
// before the reference labels guarded their marks of protected objects
// (depv1alpha1.FinalizerMarks): nothing else removes it any more, and a rule
// being deleted would wait for it forever. The marks themselves need no
// step: no configuration honours them any more (the merge patch of the
// configurations replaces the DELETE webhook, object selector included).
// This is the whole upgrade from those releases; a rule without the
// finalizer costs nothing.
func (r *Reconciler) dropLegacyFinalizers(ctx context.Context, rules []depv1alpha1.DependencyRule) error {
	var errs []error
	for i := range rules {
		rule := &rules[i]
		if !slices.Contains(rule.Finalizers, depv1alpha1.FinalizerMarks) {
			continue
		}
		key := kcp.KeyOf(rule)
		cl, err := r.cluster(ctx, key.Cluster)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		updated := rule.DeepCopy()
		updated.Finalizers = slices.DeleteFunc(updated.Finalizers, func(f string) bool { return f == depv1alpha1.FinalizerMarks })
		err = cl.Client.Patch(ctx, updated, client.MergeFromWithOptions(rule, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			log.FromContext(ctx).Info("Removed the finalizer of an earlier release from a rule", "rule", key, "finalizer", depv1alpha1.FinalizerMarks)
		case apierrors.IsNotFound(err):
		default:
			errs = append(errs, fmt.Errorf("failed to remove the finalizer %s from DependencyRule %s: %w", depv1alpha1.FinalizerMarks, key, err))
		}
	}
	return kerrors.NewAggregate(errs)
}
