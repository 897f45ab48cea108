package cleaner

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	depv1alpha1 "github.com/opendefensecloud/dependency-controller/api/v1alpha1"
	"github.com/opendefensecloud/dependency-controller/internal/kcp"
)

// ManagerFinalizers keeps the marks finalizer on rules through the clients
// of a multicluster manager's workspaces (the APIExport's virtual
// workspace): it reads the rule from the manager's cache and patches it
// with an optimistic lock, so that a patch from an outdated cache fails
// with a conflict instead of dropping another finalizer.
type ManagerFinalizers struct {
	// Manager is the webhook's manager.
	Manager mcmanager.Manager
}

// Add implements Finalizers.
func (f ManagerFinalizers) Add(ctx context.Context, rule kcp.ObjectKey, uid types.UID) error {
	return f.update(ctx, rule, uid, func(finalizers []string) []string {
		if slices.Contains(finalizers, depv1alpha1.FinalizerMarks) {
			return nil
		}
		return append(finalizers, depv1alpha1.FinalizerMarks)
	})
}

// Remove implements Finalizers.
func (f ManagerFinalizers) Remove(ctx context.Context, rule kcp.ObjectKey, uid types.UID) error {
	return f.update(ctx, rule, uid, func(finalizers []string) []string {
		if !slices.Contains(finalizers, depv1alpha1.FinalizerMarks) {
			return nil
		}
		return slices.DeleteFunc(finalizers, func(s string) bool { return s == depv1alpha1.FinalizerMarks })
	})
}

// update patches the finalizers of the rule to what change returns, unless
// it returns nil (nothing to do) or the rule has another UID.
func (f ManagerFinalizers) update(ctx context.Context, key kcp.ObjectKey, uid types.UID, change func([]string) []string) error {
	cl, err := f.Manager.GetCluster(ctx, multicluster.ClusterName(key.Cluster))
	if err != nil {
		return fmt.Errorf("failed to get logical cluster %s: %w", key.Cluster, err)
	}
	c := cl.GetClient()
	rule := &depv1alpha1.DependencyRule{}
	if err := c.Get(ctx, client.ObjectKey{Name: key.Name}, rule); err != nil {
		return err
	}
	if rule.UID != uid {
		return nil // another rule of that name; the registry will see it
	}
	finalizers := change(slices.Clone(rule.Finalizers))
	if finalizers == nil {
		return nil
	}
	patched := rule.DeepCopy()
	patched.Finalizers = finalizers
	return c.Patch(ctx, patched, client.MergeFromWithOptions(rule, client.MergeFromWithOptimisticLock{}))
}
