package kcpenv

import (
	"context"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// WatchDeletions watches the objects of resource from now on until ctx is
// done, and calls deleted with the namespace, the name and the revision of
// each deletion, from a goroutine of its own. The resourceVersion of a
// DELETED event is the revision of the deletion, and the types of one
// workspace share its shard's revisions, so revisions order deletions within
// a workspace. A deletion the watch misses (it ended early) is not reported.
func WatchDeletions(ctx context.Context, resource dynamic.ResourceInterface, deleted func(namespace, name string, revision int64)) error {
	list, err := resource.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	// The longest watch the server grants; the default ends after 30 to 60
	// minutes, a measurement may take longer.
	timeout := int64(7200)
	events, err := resource.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion(), TimeoutSeconds: &timeout})
	if err != nil {
		return err
	}
	go func() {
		defer events.Stop()
		for ev := range events.ResultChan() {
			if ev.Type != watch.Deleted {
				continue
			}
			obj, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			if rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64); err == nil {
				deleted(obj.GetNamespace(), obj.GetName(), rv)
			}
		}
	}()
	return nil
}
