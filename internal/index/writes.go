package index

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// The webhook writes objects in few cases, each with the consent of their
// provider (patch, delete or create on its APIExport's content): it records
// a deferred deletion on a protected object and replays it, removes records
// that do not verify or expired, with an Event on the object, and has
// dependents that existed before their rules relabelled. The writes go,
// like reads, through the virtual workspace of the object's APIExport on the
// shard that serves the workspace, and are retried within the deadline of
// ctx while they fail for a reason that clears by itself.

// Patch patches the object of src named name in cluster (in namespace, if
// the resource is namespaced) with body, a patch of type pt, and returns
// the patched object. An object that does not exist is a NotFound error.
func (ix *Index) Patch(ctx context.Context, src Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) ([]byte, error) {
	var patched []byte
	err := ix.write(ctx, src, cluster, namespace, name, func(r *vw.Reader, path []string) error {
		var err error
		patched, err = r.Patch(ctx, path, pt, body)
		return err
	})
	return patched, err
}

// CreateEvent creates the core Event body (JSON) in namespace of cluster,
// through the virtual workspace of src on the shard that serves cluster:
// the provider's APIExport must claim events, and the workspace must have
// accepted the claim.
func (ix *Index) CreateEvent(ctx context.Context, src Source, cluster logicalcluster.Name, namespace string, body []byte) error {
	w := ix.watch(src)
	if w == nil {
		return fmt.Errorf("%s is not watched", src)
	}
	u, ok := w.Serving(cluster)
	if !ok {
		urls, _ := w.Shards(cluster)
		if len(urls) == 0 {
			return fmt.Errorf("%s: %w", src, errNotInspected)
		}
		u = urls[0]
	}
	r, err := ix.readers.For(u)
	if err != nil {
		return err
	}
	return ix.retry(ctx, func() error { return r.Create(ctx, eventsPath(cluster, namespace), nil, body) })
}

// Delete deletes the object of src named name in cluster (in namespace, if
// the resource is namespaced) with opts. An object that does not exist is a
// NotFound error.
func (ix *Index) Delete(ctx context.Context, src Source, cluster logicalcluster.Name, namespace, name string, opts metav1.DeleteOptions) error {
	return ix.write(ctx, src, cluster, namespace, name, func(r *vw.Reader, path []string) error {
		return r.Delete(ctx, path, opts)
	})
}

// writeFailed carries the error of a write out of onShardOf, which would
// take a 403 (a webhook's denial, or a missing grant) for a shard that does
// not serve the workspace and try the next one.
type writeFailed struct{ err error }

func (w writeFailed) Error() string { return w.err.Error() }

// write writes the object with do on the shard that serves cluster. Where
// the watch of src knows that shard (see Serving), it writes there at
// once; otherwise it finds the shard by reading the object on each (kcp's
// virtual workspace refuses, with 403, a workspace that a shard does not
// serve). Only the read tells shards apart; whatever the write answers is
// its outcome. An object that is gone is a NotFound error.
func (ix *Index) write(ctx context.Context, src Source, cluster logicalcluster.Name, namespace, name string, do func(r *vw.Reader, path []string) error) error {
	w := ix.watch(src)
	if w == nil {
		return fmt.Errorf("%s is not watched", src)
	}
	path := append(vw.ResourcePath(cluster.Path(), src.Resource, namespace), name)
	if u, ok := w.Serving(cluster); ok {
		r, err := ix.readers.For(u)
		if err != nil {
			return err
		}
		return ix.retry(ctx, func() error { return do(r, path) })
	}
	return ix.retry(ctx, func() error {
		wrote := false
		err := ix.onShardOf(src, cluster, func(r *vw.Reader, _ State) error {
			// A GET is a linearizable read from etcd that waits for no
			// progress notification (a LIST without a resourceVersion
			// would, up to 100ms on a busy shard). 403 means "not this
			// shard"; 404 means this shard, and the object is gone.
			body, err := r.Get(ctx, path, nil)
			if err != nil {
				return err
			}
			vw.Drain(body)
			wrote = true
			if err := do(r, path); err != nil {
				return writeFailed{err}
			}
			return nil
		})
		var failed writeFailed
		if errors.As(err, &failed) {
			return failed.err
		}
		if err == nil && !wrote {
			// No shard serves the workspace for this export: it does not
			// bind it, so the object does not exist.
			return apierrors.NewNotFound(src.Resource.GroupResource(), name)
		}
		if err != nil {
			return fmt.Errorf("failed to find the shard of %s in %s: %w", src, cluster, err)
		}
		return nil
	})
}
