package objects

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcp-dev/logicalcluster/v3"

	"github.com/opendefensecloud/dependency-controller/internal/index"
	"github.com/opendefensecloud/dependency-controller/internal/index/route"
	"github.com/opendefensecloud/dependency-controller/internal/vw"
)

// Patch patches the object of src named name in cluster (in namespace, if
// the resource is namespaced) with body, a patch of type pt, and returns
// the patched object. An object that does not exist is a NotFound error.
func (c *Client) Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) ([]byte, error) {
	return c.patch(ctx, src, cluster, namespace, name, pt, body, 0)
}

// patch is Patch, taking a workspace that every shard refuses for settle
// for one that does not bind the export (see route.ErrUnbound).
func (c *Client) patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte, settle time.Duration) ([]byte, error) {
	var patched []byte
	err := c.write(ctx, src, cluster, namespace, name, settle, func(shard *vw.Client, path []string) error {
		var err error
		patched, err = shard.Patch(ctx, path, pt, body)
		return err
	})
	return patched, err
}

// DryRunPatch sends a dry-run merge patch of the object of src named name
// in cluster (in namespace, if the resource is namespaced) and returns the
// object as admission left it; nothing is stored. An object that does not
// exist is a NotFound error.
func (c *Client) DryRunPatch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, body []byte) ([]byte, error) {
	return c.dryRunPatch(ctx, src, cluster, namespace, name, body)
}

// DryRunPatchStatus sends the same through the status subresource. A
// resource without a status subresource is a NotFound error too.
func (c *Client) DryRunPatchStatus(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, body []byte) ([]byte, error) {
	return c.dryRunPatch(ctx, src, cluster, namespace, name, body, "status")
}

// dryRunPatch sends a dry-run merge patch of the object, or of its
// subresource if one is named.
func (c *Client) dryRunPatch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, body []byte, subresource ...string) ([]byte, error) {
	var patched []byte
	err := c.write(ctx, src, cluster, namespace, name, 0, func(shard *vw.Client, path []string) error {
		var err error
		patched, err = shard.Patch(ctx, append(slices.Clone(path), subresource...), types.MergePatchType, body, url.Values{"dryRun": {metav1.DryRunAll}})
		return err
	})
	return patched, err
}

// Delete deletes the object of src named name in cluster (in namespace, if
// the resource is namespaced) with opts. An object that does not exist is a
// NotFound error.
func (c *Client) Delete(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, opts metav1.DeleteOptions) error {
	return c.write(ctx, src, cluster, namespace, name, 0, func(shard *vw.Client, path []string) error {
		return shard.Delete(ctx, path, opts)
	})
}

// writeFailed carries the error of a write out of OnShardOf, which would
// take a 403 (a webhook's denial, or a missing grant) for a shard that does
// not serve the workspace and try the next one.
type writeFailed struct{ err error }

func (w writeFailed) Error() string { return w.err.Error() }

// write writes the object with do on the shard that serves cluster. Where
// the router knows that shard (see Router.Serving), it writes there at
// once; otherwise it finds the shard by reading the object on each (kcp's
// virtual workspace refuses, with 403, a workspace that a shard does not
// serve). Only the read tells shards apart; whatever the write answers is
// its outcome. An object that is gone is a NotFound error, and so is one in
// a workspace that every shard refuses for settle (see route.ErrUnbound)
// and that, if settle is not zero, does not bind the export (see refused):
// a 403 of every shard for a workspace that does is a Forbidden error.
func (c *Client) write(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, settle time.Duration, do func(shard *vw.Client, path []string) error) error {
	shard, known, err := c.router.Serving(src, cluster)
	if err != nil {
		return err
	}
	path := append(vw.ResourcePath(cluster.Path(), src.Resource, namespace), name)
	if known {
		err := c.router.Retry(ctx, func() error { return route.Served(do(shard, path), name) })
		if settle == 0 || !apierrors.IsForbidden(err) {
			return err
		}
		// The shard known to serve the workspace may be known only as
		// the one shard there is, and its 403 may mean that the workspace
		// does not bind the export: settled, find out as below.
	}
	start := c.now()
	return c.router.Retry(ctx, func() error {
		wrote := false
		err := c.router.OnShardOf(src, cluster, func(shard *vw.Client, _ index.State) error {
			// A GET is a linearizable read from etcd that waits for no
			// progress notification (a LIST without a resourceVersion
			// would, up to 100ms on a busy shard). 403 means "not this
			// shard"; 404 means this shard, and the object is gone.
			body, err := shard.Get(ctx, path, nil)
			if err != nil {
				return route.Served(err, name)
			}
			vw.Drain(body)
			wrote = true
			if err := do(shard, path); err != nil {
				return writeFailed{route.Served(err, name)}
			}
			return nil
		})
		var failed writeFailed
		if errors.As(err, &failed) {
			return failed.err
		}
		if err == nil && !wrote {
			if err := route.Unserved(src, cluster, c.now().Sub(start), settle); err != nil {
				return err
			}
			if settle > 0 {
				return c.refused(ctx, src, cluster, name)
			}
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

// maxObjectSize bounds what Get reads of one object; the API server stores
// objects of at most a few MB.
const maxObjectSize = 8 << 20

// Get reads the object of src named name in cluster (in namespace, if the
// resource is namespaced) and returns it as JSON: a linearizable read from
// etcd. An object that does not exist is a NotFound error.
func (c *Client) Get(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string) ([]byte, error) {
	return c.get(ctx, src, cluster, namespace, name, 0)
}

// get is Get, taking a workspace that every shard refuses for settle for
// one that does not bind the export (see route.ErrUnbound, and write).
func (c *Client) get(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, settle time.Duration) ([]byte, error) {
	var raw []byte
	path := append(vw.ResourcePath(cluster.Path(), src.Resource, namespace), name)
	read := func(shard *vw.Client) error {
		body, err := shard.Get(ctx, path, nil)
		if err != nil {
			return route.Served(err, name)
		}
		defer vw.Drain(body)
		raw, err = io.ReadAll(io.LimitReader(body, maxObjectSize))
		return err
	}
	shard, known, err := c.router.Serving(src, cluster)
	if err != nil {
		return nil, err
	}
	if known {
		err := c.router.Retry(ctx, func() error { return read(shard) })
		if settle == 0 || !apierrors.IsForbidden(err) {
			return raw, err
		}
		// Known perhaps only as the one shard there is (see write).
	}
	found := false
	start := c.now()
	err = c.router.Retry(ctx, func() error {
		err := c.router.OnShardOf(src, cluster, func(shard *vw.Client, _ index.State) error {
			if err := read(shard); err != nil {
				if apierrors.IsNotFound(err) {
					// This shard serves the workspace; the object is gone.
					return writeFailed{err}
				}
				return err
			}
			found = true
			return nil
		})
		if err == nil && !found {
			if err := route.Unserved(src, cluster, c.now().Sub(start), settle); err != nil || settle == 0 {
				return err
			}
			err := c.refused(ctx, src, cluster, name)
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
				return writeFailed{err}
			}
			return err
		}
		return err
	})
	var failed writeFailed
	switch {
	case errors.As(err, &failed):
		return nil, failed.err
	case err != nil:
		return nil, fmt.Errorf("failed to find the shard of %s in %s: %w", src, cluster, err)
	case !found:
		// No shard serves the workspace for this export: it does not bind
		// it, so the object does not exist.
		return nil, apierrors.NewNotFound(src.Resource.GroupResource(), name)
	}
	return raw, nil
}

// Settled reads and writes objects as the Client does, except that it takes
// a workspace that every shard's virtual workspace refuses for one that does
// not bind the export, and so holds no object, only once the refusals have
// lasted route.BindingSettle and the export's bindings do not name it (a
// workspace they name is refused by the provider's grant: a Forbidden
// error, also with one shard, which the Client takes to serve every
// workspace and whose 403 it returns): the reads and writes of the objects that
// dependents' writes add references to (the ledger writer of package
// inflight), whose references would otherwise go unrecorded right after a
// workspace bound the export.
type Settled struct{ c *Client }

// Settled returns the Client's settled reads and writes.
func (c *Client) Settled() Settled { return Settled{c: c} }

// Get is Client.Get, settled.
func (s Settled) Get(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string) ([]byte, error) {
	return s.c.get(ctx, src, cluster, namespace, name, route.BindingSettle)
}

// Patch is Client.Patch, settled.
func (s Settled) Patch(ctx context.Context, src index.Source, cluster logicalcluster.Name, namespace, name string, pt types.PatchType, body []byte) ([]byte, error) {
	return s.c.patch(ctx, src, cluster, namespace, name, pt, body, route.BindingSettle)
}
