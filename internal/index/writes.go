package index

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// The webhook writes protected objects in two cases only, both with the
// consent of their provider (patch and delete on its APIExport's content):
// it records a deferred deletion on an object and replays it, and it marks
// objects that nothing references. The writes go, like reads, through the
// virtual workspace of the object's APIExport on the shard that serves the
// workspace, and are retried within the deadline of ctx while they fail for
// a reason that clears by itself.

// Patch patches the object of src named name in cluster (in namespace, if
// the resource is namespaced) with body, a patch of type pt.
func (ix *Index) Patch(ctx context.Context, src Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) error {
	return ix.retry(ctx, func() error {
		return ix.onShardOf(src, cluster, func(r *vw.Reader, _ State) error {
			return r.Patch(ctx, append(vw.ResourcePath(cluster.Path(), src.Resource, namespace), name), pt, body)
		})
	})
}

// Delete deletes the object of src named name in cluster (in namespace, if
// the resource is namespaced) with opts.
func (ix *Index) Delete(ctx context.Context, src Source, cluster logicalcluster.Name, namespace, name string, opts metav1.DeleteOptions) error {
	return ix.retry(ctx, func() error {
		return ix.onShardOf(src, cluster, func(r *vw.Reader, _ State) error {
			return r.Delete(ctx, append(vw.ResourcePath(cluster.Path(), src.Resource, namespace), name), opts)
		})
	})
}
