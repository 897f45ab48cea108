package kcpenv

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Deletions is what a watch of a resource saw deleted: the revision of each
// deletion, by namespace and name. The resourceVersion of a DELETED event is
// the revision of the deletion, and the types of one workspace share its
// shard's revisions, so revisions order deletions within a workspace.
type Deletions struct {
	lock   sync.Mutex
	at     map[types.NamespacedName]int64
	reason error
}

// WatchDeletions watches the objects of resource from now on until ctx is
// done and records their deletions. A watch that the server ends
// (kube-apiserver closes the watch of a client that falls behind a burst of
// events) is resumed from the last revision it saw, so that no deletion is
// missed; if it cannot be (that revision is no longer in the server's
// window), Revision says why for every object not seen deleted, and
// deletions from then on are not recorded.
func WatchDeletions(ctx context.Context, resource dynamic.ResourceInterface) (*Deletions, error) {
	list, err := resource.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("failed to list before the watch of deletions: %w", err)
	}
	// The longest watch the server grants; the default ends after 30 to 60
	// minutes, a measurement may take longer.
	timeout := int64(7200)
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.TimeoutSeconds = &timeout
			return resource.Watch(ctx, opts)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("failed to watch deletions: %w", err)
	}
	d := &Deletions{at: map[types.NamespacedName]int64{}}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				d.observe(ev)
			}
		}
	}()
	return d, nil
}

// observe records what one event of the watch says.
func (d *Deletions) observe(ev watch.Event) {
	d.lock.Lock()
	defer d.lock.Unlock()
	switch ev.Type {
	case watch.Error:
		d.reason = fmt.Errorf("the watch of deletions ended: %w", apierrors.FromObject(ev.Object))
	case watch.Deleted:
		obj, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return
		}
		if rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64); err == nil {
			d.at[types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}] = rv
		}
	}
}

// Revision returns the revision at which the object namespace/name was
// deleted, and whether the watch saw it deleted. If it did not, err says why
// the watch ended early, if it did: the object may then have been deleted
// unseen, and its absence here proves nothing.
func (d *Deletions) Revision(namespace, name string) (rev int64, deleted bool, err error) {
	d.lock.Lock()
	defer d.lock.Unlock()
	if rv, ok := d.at[types.NamespacedName{Namespace: namespace, Name: name}]; ok {
		return rv, true, nil
	}
	return 0, false, d.reason
}
