package kcpenv

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// WatchDeletions watches the objects of resource from now on until ctx is
// done, and calls deleted with the namespace, the name and the revision of
// each deletion, from a goroutine of its own. The resourceVersion of a
// DELETED event is the revision of the deletion, and the types of one
// workspace share its shard's revisions, so revisions order deletions within
// a workspace. A watch that the server ends (kube-apiserver closes the
// watch of a client that falls behind a burst of events) is resumed from
// the last revision it saw, so that no deletion is missed; if it cannot be
// (that revision is no longer in the server's window), ended returns why,
// and deletions from then on are not reported.
func WatchDeletions(ctx context.Context, resource dynamic.ResourceInterface, deleted func(namespace, name string, revision int64)) (ended func() error, err error) {
	list, err := resource.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, err
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
		return nil, err
	}
	var (
		lock   sync.Mutex
		reason error
	)
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
				switch ev.Type {
				case watch.Error:
					lock.Lock()
					reason = fmt.Errorf("the watch of deletions ended: %w", apierrors.FromObject(ev.Object))
					lock.Unlock()
				case watch.Deleted:
					obj, ok := ev.Object.(*unstructured.Unstructured)
					if !ok {
						continue
					}
					if rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64); err == nil {
						deleted(obj.GetNamespace(), obj.GetName(), rv)
					}
				}
			}
		}
	}()
	return func() error {
		lock.Lock()
		defer lock.Unlock()
		return reason
	}, nil
}
